#!/usr/bin/env bash
# Packs what multi_gpu.sh and elastic.sh need for a GPU machine that has no Node.js and no registry
# (the device machines of this workplace): bash native/gpu-tests/stage_carry.sh DEST
# Build first (npm ci, nx build). Writes DEST/node.xz (this machine's node binary), DEST/agent.tar.xz
# (the agent's and its libraries' dist/, and the node_modules packages the agent's services load:
# found by what mg_agent.mjs resolves, with their dependencies), DEST/repo/native (this tree's
# native/, without its project.json: a second Nx project "native" inside the tree would stop every
# nx command) and DEST/run.sh. Where the checkout itself travels with DEST as one of its top-level
# folders (ignored, carried), run there:
#   bash DEST/run.sh elastic.sh machine build elastic
# (Node into /tmp/bin, the tarball over the checkout, then native/gpu-tests/<script> <args>).
# Elsewhere:
#   python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('DEST/node.xz'), open('/tmp/bin/node','wb'))"
#   chmod +x /tmp/bin/node; export PATH=/tmp/bin:$PATH
#   cd DEST/repo && python3 -c "import tarfile; tarfile.open('../agent.tar.xz').extractall()"
#   bash native/gpu-tests/multi_gpu.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$(mkdir -p "$1" && cd "$1" && pwd)"
cd "$root"
xz -T2 -6 -c "$(command -v node)" >"$dest/node.xz"
# The packages mg_agent.mjs's imports reach, and theirs (dependencies and optionalDependencies
# that are installed: koffi's one native build for this platform).
packages="$(node -e '
const fs = require("fs"), path = require("path");
const seen = new Set();
const visit = (name) => {
  const dir = path.join("node_modules", name);
  if (seen.has(name) || !fs.existsSync(dir)) return;
  seen.add(name);
  const pj = JSON.parse(fs.readFileSync(path.join(dir, "package.json")));
  for (const d of Object.keys({ ...pj.dependencies, ...pj.optionalDependencies })) visit(d);
};
const agent = JSON.parse(fs.readFileSync("apps/agent/package.json"));
const skip = new Set(["@nestjs/core", "@nestjs/microservices", "dockerode"]); // not loaded by mg_agent.mjs
for (const lib of ["agent", "limits", "protocol", "link"]) {
  const pj = JSON.parse(fs.readFileSync(lib === "agent" ? "apps/agent/package.json" : `libs/${lib}/package.json`));
  for (const d of Object.keys(pj.dependencies ?? {})) if (!d.startsWith("@gpushards/") && !skip.has(d)) visit(d);
}
console.log([...seen].map((p) => "node_modules/" + p).join("\n"));
')"
# shellcheck disable=SC2086
tar -cJf "$dest/agent.tar.xz" package.json apps/agent/package.json apps/agent/dist \
  libs/limits/package.json libs/limits/dist libs/protocol/package.json libs/protocol/dist \
  libs/link/package.json libs/link/dist node_modules/@gpushards/agent node_modules/@gpushards/limits \
  node_modules/@gpushards/protocol node_modules/@gpushards/link $packages
rm -rf "$dest/repo"
mkdir -p "$dest/repo"
tar -cf - --exclude=native/build --exclude=native/project.json native | tar -xf - -C "$dest/repo"
cat >"$dest/run.sh" <<'EOF'
#!/usr/bin/env bash
# In a checkout that carries this folder at its top level: Node and the agent's build from here,
# then native/gpu-tests/SCRIPT with the rest of the arguments (stage_carry.sh wrote this).
set -euo pipefail
carry="$(cd "$(dirname "$0")" && pwd)"
cd "$carry/.."
[ -L node_modules ] && rm node_modules # a worktree's link to another checkout's: dangling here
mkdir -p /tmp/bin
[ -x /tmp/bin/node ] ||
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open('/tmp/bin/node','wb'))" "$carry/node.xz"
chmod +x /tmp/bin/node
export PATH=/tmp/bin:$PATH
python3 -c "import sys,tarfile; tarfile.open(sys.argv[1]).extractall()" "$carry/agent.tar.xz"
script="$1"
shift
exec bash "native/gpu-tests/$script" "$@"
EOF
chmod +x "$dest/run.sh"
du -sh "$dest"/*
