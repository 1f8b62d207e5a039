# Sourced by run.sh and bench.sh on the GPU machine, from the repository root: puts the
# carried Node.js on PATH (that machine has none; test/gpu/prepare.sh packs
# .gpu/node.tar.xz), or exits 3 saying what to carry.
if ! command -v node >/dev/null 2>&1 && [ -f .gpu/node.tar.xz ]; then
  tar -C / -xJf .gpu/node.tar.xz && export PATH=/usr/bin:$PATH
fi
command -v node >/dev/null 2>&1 || { echo "node not found: carry .gpu/node.tar.xz (test/gpu/prepare.sh makes it)"; exit 3; }
