// A self-contained SVG flame graph from `perf script` output: stacks are folded (root
// first), merged into a tree and drawn as nested rectangles whose widths are sample counts.
// Frames are coloured by where the code lives: kernel, a te addon, libfabric, libc, V8/JS.

/** Folds `perf script` text into "frame;frame;…" → samples (root first), one entry per thread name. */
export function foldPerfScript(text) {
  const folded = new Map();
  for (const block of text.split(/\n\s*\n/)) {
    const lines = block.split('\n').filter((l) => l.trim());
    if (lines.length < 2) continue;
    const comm = lines[0].trim().split(/\s+/)[0];
    const frames = [];
    for (const line of lines.slice(1)) {
      // "    ffffffff8100 symbol+0x12 (dso)"
      const m = /^\s*[0-9a-f]+\s+(.+?)\s+\((.*)\)\s*$/.exec(line);
      if (!m) continue;
      let sym = m[1].replace(/\+0x[0-9a-f]+$/, '');
      const dso = m[2].split('/').pop();
      if (sym === '[unknown]') sym = `[${dso}]`;
      frames.push(`${sym}\u0001${dso}`);
    }
    if (frames.length === 0) continue;
    const key = [comm, ...frames.reverse()].join(';');
    folded.set(key, (folded.get(key) ?? 0) + 1);
  }
  return folded;
}

function colourOf(name) {
  const [sym, dso = ''] = name.split('\u0001');
  if (dso.includes('kernel') || sym.startsWith('[k]')) return [230, 150, 60];
  if (/^te_.*\.node$/.test(dso)) return [220, 70, 60];
  if (dso.includes('libfabric')) return [200, 110, 200];
  if (dso.startsWith('libc') || dso.startsWith('ld-linux')) return [110, 170, 220];
  if (dso.startsWith('perf-') || dso.endsWith('.map') || sym.startsWith('Builtin:') || sym.startsWith('JS:') || sym.startsWith('LazyCompile:'))
    return [100, 190, 100];
  if (dso === 'node') return [150, 200, 110];
  return [190, 190, 190];
}

const escape = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** Renders folded stacks as an SVG string; `title` is printed on top. */
export function renderFlameGraph(folded, { title, width = 1200, frameHeight = 16, minWidth = 0.5 } = {}) {
  const root = { name: 'all', value: 0, children: new Map() };
  for (const [stack, n] of folded) {
    root.value += n;
    let node = root;
    for (const frame of stack.split(';')) {
      let child = node.children.get(frame);
      if (!child) node.children.set(frame, (child = { name: frame, value: 0, children: new Map() }));
      child.value += n;
      node = child;
    }
  }
  const rects = [];
  let depthMax = 0;
  const scale = (width - 20) / Math.max(root.value, 1);
  const walk = (node, x, depth) => {
    depthMax = Math.max(depthMax, depth);
    const w = node.value * scale;
    if (w < minWidth) return;
    rects.push({ node, x, depth, w });
    let cx = x;
    for (const child of [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      walk(child, cx, depth + 1);
      cx += child.value * scale;
    }
  };
  walk(root, 10, 0);
  const height = (depthMax + 1) * frameHeight + 60;
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="monospace" font-size="11">`];
  out.push(`<rect width="100%" height="100%" fill="#fdfdf5"/>`);
  out.push(`<text x="${width / 2}" y="20" text-anchor="middle" font-size="15">${escape(title ?? 'flame graph')}</text>`);
  out.push(
    `<text x="10" y="${height - 10}" font-size="10">width = share of ${root.value} samples; red: te addon, purple: libfabric, orange: kernel, blue: libc, green: Node/V8/JS. Hover a frame for its count.</text>`,
  );
  for (const { node, x, depth, w } of rects) {
    const y = height - 30 - (depth + 1) * frameHeight;
    const [sym, dso = ''] = node.name.split('\u0001');
    const [r, g, b] = colourOf(node.name);
    const pct = ((100 * node.value) / Math.max(root.value, 1)).toFixed(2);
    const label = sym.length * 6.5 < w - 4 ? sym : sym.slice(0, Math.max(0, Math.floor((w - 4) / 6.5) - 2)) + (w > 20 ? '..' : '');
    out.push(
      `<g><title>${escape(sym)}${dso ? ` (${escape(dso)})` : ''}: ${node.value} samples, ${pct}%</title><rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${frameHeight - 1}" fill="rgb(${r},${g},${b})" rx="1"/>${w > 20 ? `<text x="${(x + 3).toFixed(1)}" y="${y + frameHeight - 4}">${escape(label)}</text>` : ''}</g>`,
    );
  }
  out.push('</svg>');
  return out.join('\n');
}
