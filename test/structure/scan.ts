// Finds source files over the line limit and functions over the function limit, for
// test/structure.test.ts. TypeScript and JavaScript are walked with the TypeScript compiler's
// parser (the same functions ESLint's max-lines-per-function measures: start to end line,
// blank and comment lines included, IIFEs left out); C and C++ by matching the braces of each
// function body outside comments, strings and preprocessor lines.
import { readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import ts from 'typescript';

export const MAX_FILE_LINES = 500;
export const MAX_FUNCTION_LINES = 80;
export const TS_EXTENSIONS = ['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs'];
export const CXX_EXTENSIONS = ['.c', '.cc', '.cpp', '.h', '.hpp', '.cu', '.cuh'];

/** A file or a function over its limit; `key` names it in an allowance list ("path" or "path:function"). */
export interface Violation {
  key: string;
  kind: 'file' | 'function';
  lines: number;
}

// A sentence saying why a file is long: `// Long file: <why>` (any comment leader), or the
// ESLint directive with its reason, `/* eslint-disable max-lines -- <why> */`.
const LONG_FILE = /(?:^|\n)\s*(?:\/\/|\/?\*|#)\s*(?:Long file:\s*\S.{9,}|eslint-disable max-lines\s+--\s*\S.{9,})/;
// The same for one function, on one of the two lines above it.
const LONG_FUNCTION = /(?:\/\/|\/?\*)\s*(?:Long function:\s*\S.{9,}|eslint-disable-next-line max-lines-per-function\s+--\s*\S.{9,})/;
const FILE_WIDE_FUNCTIONS = /eslint-disable max-lines-per-function\s+--\s*\S.{9,}/;

function lineCount(text: string): number {
  return text.endsWith('\n') ? text.split('\n').length - 1 : text.split('\n').length;
}

function explained(lines: string[], startLine: number): boolean {
  return [startLine - 1, startLine - 2].some((i) => i >= 0 && LONG_FUNCTION.test(lines[i]!));
}

/** Every violation in `file` (a path relative to `root`). */
export function scanFile(root: string, file: string): Violation[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: Violation[] = [];
  const total = lineCount(text);
  if (total > MAX_FILE_LINES && !LONG_FILE.test(text)) out.push({ key: file, kind: 'file', lines: total });
  if (FILE_WIDE_FUNCTIONS.test(text)) return out;
  const ext = extname(file);
  const functions = TS_EXTENSIONS.includes(ext) ? tsFunctions(file, text) : CXX_EXTENSIONS.includes(ext) ? cxxFunctions(text) : [];
  const lines = text.split('\n');
  const seen = new Map<string, number>();
  for (const f of functions) {
    if (f.end - f.start + 1 <= MAX_FUNCTION_LINES || explained(lines, f.start)) continue;
    // Two long functions of one name in a file (overloads, two `test` callbacks) get #2, #3, ...
    const n = (seen.get(f.name) ?? 0) + 1;
    seen.set(f.name, n);
    out.push({ key: `${file}:${f.name}${n > 1 ? `#${n}` : ''}`, kind: 'function', lines: f.end - f.start + 1 });
  }
  return out;
}

interface FunctionSpan {
  name: string;
  start: number; // 0-based line of the function's first line
  end: number; // 0-based line of its last line
}

function tsFunctions(file: string, text: string): FunctionSpan[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: FunctionSpan[] = [];
  const line = (pos: number): number => sf.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body && !isIife(node)) {
      out.push({ name: tsName(node, sf), start: line(node.getStart(sf)), end: line(node.getEnd()) });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function isIife(node: ts.Node): boolean {
  let p = node.parent;
  while (p && ts.isParenthesizedExpression(p)) p = p.parent;
  return !!p && ts.isCallExpression(p) && (p.expression === node || ts.isParenthesizedExpression(p.expression));
}

/** The function's own name, else what it is assigned to, else `callback of <call>('<first argument>')`. */
function tsName(node: ts.Node, sf: ts.SourceFile): string {
  const named = (node as { name?: ts.Node }).name;
  if (named && (ts.isIdentifier(named) || ts.isStringLiteral(named) || ts.isPrivateIdentifier(named))) return named.text;
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const p = node.parent;
  if (p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p)) && p.name) return p.name.getText(sf);
  if (p && ts.isCallExpression(p)) {
    const first = p.arguments[0];
    const label = first && ts.isStringLiteralLike(first) ? `('${first.text.slice(0, 60)}')` : '';
    return `callback of ${p.expression.getText(sf).slice(0, 40)}${label}`;
  }
  return `anonymous@${sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1}`;
}

/** Comments, string and character literals and preprocessor lines replaced by spaces (newlines kept). */
export function stripCxx(text: string): string {
  const out = text.split('');
  const blank = (from: number, to: number): void => {
    for (let i = from; i < to; i++) if (out[i] !== '\n') out[i] = ' ';
  };
  let i = 0;
  let lineStart = true;
  while (i < text.length) {
    const c = text[i]!;
    if (lineStart && /\s/.test(c) && c !== '\n') {
      i++;
      continue;
    }
    if (lineStart && c === '#') {
      let j = i;
      while (j < text.length && !(text[j] === '\n' && text[j - 1] !== '\\')) j++;
      blank(i, j);
      i = j;
      continue;
    }
    lineStart = c === '\n';
    if (c === '/' && text[i + 1] === '/') {
      const j = text.indexOf('\n', i);
      const end = j < 0 ? text.length : j;
      blank(i, end);
      i = end;
    } else if (c === '/' && text[i + 1] === '*') {
      const j = text.indexOf('*/', i + 2);
      const end = j < 0 ? text.length : j + 2;
      blank(i, end);
      i = end;
    } else if (c === 'R' && text[i + 1] === '"') {
      const m = /^R"([^(]*)\(/.exec(text.slice(i, i + 20));
      const close = m ? text.indexOf(`)${m[1]}"`, i) : -1;
      const end = close < 0 ? i + 2 : close + m![1]!.length + 2;
      blank(i, end);
      i = end;
    } else if (c === '"' || (c === "'" && !/[0-9a-fA-F]/.test(text[i - 1] ?? ''))) {
      // A quote after a hex digit is a digit separator (1'000), not a character literal.
      let j = i + 1;
      while (j < text.length && text[j] !== c && text[j] !== '\n') j += text[j] === '\\' ? 2 : 1;
      blank(i, j + 1);
      i = j + 1;
    } else i++;
  }
  return out.join('');
}

const SCOPE_HEADER = /\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s*$/;
const FUNCTION_HEADER = /\)\s*(?:const|noexcept(?:\s*\([^)]*\))?|override|final|mutable|&|&&|->\s*[\w:<>,\s*&]+|\s)*$|\)\s*:\s*[\w:]+\s*[({][\s\S]*[)}]\s*$/;

export function cxxFunctions(text: string): FunctionSpan[] {
  const code = stripCxx(text);
  const out: FunctionSpan[] = [];
  const stack: { kind: 'scope' | 'function' | 'block'; span?: FunctionSpan }[] = [];
  let boundary = 0; // just after the last ; { or } outside a function
  let line = 0;
  for (let i = 0; i < code.length; i++) {
    const c = code[i]!;
    if (c === '\n') line++;
    const inFunction = stack.some((s) => s.kind === 'function');
    if (c === '{') {
      if (inFunction) stack.push({ kind: 'block' });
      else {
        const header = code.slice(boundary, i);
        const trimmed = header.trim();
        if (FUNCTION_HEADER.test(trimmed) && !SCOPE_HEADER.test(trimmed.split('(')[0]!)) {
          const offset = boundary + header.search(/\S/);
          const start = line - (code.slice(offset, i).match(/\n/g)?.length ?? 0);
          const name = /([~\w:]+)\s*\(/.exec(trimmed)?.[1] ?? `anonymous@${start + 1}`;
          stack.push({ kind: 'function', span: { name, start, end: start } });
        } else stack.push({ kind: SCOPE_HEADER.test(trimmed) ? 'scope' : 'block' });
      }
      boundary = i + 1;
    } else if (c === '}') {
      const top = stack.pop();
      if (top?.kind === 'function' && top.span) out.push({ ...top.span, end: line });
      if (!inFunction || top?.kind === 'function') boundary = i + 1;
    } else if (c === ';' && !inFunction) boundary = i + 1;
  }
  return out;
}
