import { createHash } from 'node:crypto';

/**
 * The explorer: one self-contained page (no CDN, no fonts, no external script) so it works on
 * hosts without internet. It posts to /graphql with the token typed in, and lists the schema
 * through introspection.
 */
const SCRIPT = `
const $ = (id) => document.getElementById(id);
const token = $('token');
token.value = localStorage.getItem('gpushards.token') || '';
$('query').value = localStorage.getItem('gpushards.query') || '{\\n  me {\\n    role\\n    team { id name }\\n  }\\n}\\n';
$('variables').value = localStorage.getItem('gpushards.variables') || '{}';

async function graphql(query, variables) {
  const headers = { 'content-type': 'application/json' };
  const secret = token.value.trim();
  if (secret) headers.authorization = secret.startsWith('Bearer ') ? secret : 'Bearer ' + secret;
  const response = await fetch('/graphql', { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
  return response.json();
}

async function run() {
  localStorage.setItem('gpushards.token', token.value);
  localStorage.setItem('gpushards.query', $('query').value);
  localStorage.setItem('gpushards.variables', $('variables').value);
  let variables;
  try {
    variables = JSON.parse($('variables').value || '{}');
  } catch (error) {
    $('result').textContent = 'Variables are not JSON: ' + error.message;
    return;
  }
  $('result').textContent = 'running...';
  try {
    $('result').textContent = JSON.stringify(await graphql($('query').value, variables), null, 2);
  } catch (error) {
    $('result').textContent = 'Request failed: ' + error.message;
  }
}

function typeName(type) {
  if (type.kind === 'NON_NULL') return typeName(type.ofType) + '!';
  if (type.kind === 'LIST') return '[' + typeName(type.ofType) + ']';
  return type.name;
}

function signature(field) {
  const args = (field.args || []).map((a) => a.name + ': ' + typeName(a.type)).join(', ');
  return field.name + (args ? '(' + args + ')' : '') + ': ' + typeName(field.type);
}

// Introspection answers only a signed-in caller: without a token, say so and take one here.
function askForToken(list) {
  const form = document.createElement('form');
  form.id = 'schema-token';
  const label = document.createElement('label');
  label.htmlFor = 'schema-token-input';
  label.textContent = 'Listing the schema (introspection) needs a token, as every query does. ' +
    'Paste one (the admin token: cat .gpushards/admin-token):';
  const input = document.createElement('input');
  input.id = 'schema-token-input';
  input.type = 'password';
  input.autocomplete = 'off';
  input.placeholder = 'gps_...';
  const load = document.createElement('button');
  load.textContent = 'Load schema';
  form.append(label, input, load);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    token.value = input.value.trim();
    localStorage.setItem('gpushards.token', token.value);
    loadSchema();
  });
  list.appendChild(form);
  input.focus();
}

async function loadSchema() {
  const typeRef = 'kind name ofType { kind name ofType { kind name ofType { kind name } } }';
  const query = '{ __schema { queryType { name } mutationType { name } subscriptionType { name } types { name kind description ' +
    'fields { name description args { name type { ' + typeRef + ' } } type { ' + typeRef + ' } } ' +
    'inputFields { name type { ' + typeRef + ' } } enumValues { name } } } }';
  const list = $('schema');
  list.textContent = 'loading schema...';
  let result;
  try {
    result = await graphql(query, {});
  } catch (error) {
    list.textContent = 'The schema could not be read: ' + error.message;
    return;
  }
  list.textContent = '';
  if (!result.data) {
    if (!token.value.trim()) askForToken(list);
    else list.textContent = 'The token was refused: ' + ((result.errors || [])[0] || {}).message;
    return;
  }
  const schema = result.data.__schema;
  const roots = [schema.queryType, schema.mutationType, schema.subscriptionType].filter(Boolean).map((t) => t.name);
  const types = schema.types.filter((t) => !t.name.startsWith('__'));
  types.sort((a, b) => (roots.indexOf(b.name) >= 0) - (roots.indexOf(a.name) >= 0) || a.name.localeCompare(b.name));
  for (const type of types) {
    const details = document.createElement('details');
    if (roots.includes(type.name)) details.open = true;
    const summary = document.createElement('summary');
    summary.textContent = type.name + ' (' + type.kind.toLowerCase().replace('_', ' ') + ')';
    details.appendChild(summary);
    const members = (type.fields || type.inputFields || []).map(signature).concat((type.enumValues || []).map((v) => v.name));
    for (const member of members) {
      const line = document.createElement('div');
      line.className = 'member';
      line.textContent = member;
      details.appendChild(line);
    }
    list.appendChild(details);
  }
}

$('run').addEventListener('click', run);
document.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) run();
});
$('reload').addEventListener('click', loadSchema);
token.addEventListener('change', loadSchema);
loadSchema();
`;

const STYLE = `
body { font: 14px system-ui, sans-serif; margin: 0; display: grid; grid-template-columns: 1fr 1fr 22em; height: 100vh; }
header { grid-column: 1 / 4; padding: 8px 12px; background: #222; color: #eee; display: flex; gap: 12px; align-items: center; }
header input { flex: 1; font-family: monospace; }
section { display: flex; flex-direction: column; padding: 8px; min-height: 0; gap: 6px; }
textarea, pre { font: 13px ui-monospace, monospace; border: 1px solid #bbb; padding: 6px; margin: 0; }
#query { flex: 3; } #variables { flex: 1; } #result { flex: 1; overflow: auto; background: #f6f6f6; }
aside { overflow: auto; padding: 8px; border-left: 1px solid #ddd; font-size: 12px; }
.member { font-family: ui-monospace, monospace; padding-left: 1em; }
#schema-token { display: flex; flex-direction: column; gap: 6px; }
`;

export const EXPLORER_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>GPU Shards API explorer</title>
<style>${STYLE}</style>
</head>
<body>
<header>
  <strong>GPU Shards API</strong>
  <label for="token">Authorization</label>
  <input id="token" type="password" placeholder="Bearer gps_..." autocomplete="off">
  <button id="run" title="Ctrl+Enter">Run</button>
</header>
<section>
  <label for="query">Query</label>
  <textarea id="query" spellcheck="false"></textarea>
  <label for="variables">Variables (JSON)</label>
  <textarea id="variables" spellcheck="false"></textarea>
</section>
<section>
  <label for="result">Result</label>
  <pre id="result"></pre>
</section>
<aside>
  <button id="reload">Reload schema</button>
  <div id="schema">loading schema...</div>
</aside>
<script>${SCRIPT}</script>
</body>
</html>
`;

function cspHash(source: string): string {
  return `'sha256-${createHash('sha256').update(source).digest('base64')}'`;
}

/** Only this page's own script and style may run, and it may talk only to this server. */
export const EXPLORER_CSP = [
  "default-src 'none'",
  `script-src ${cspHash(SCRIPT)}`,
  `style-src ${cspHash(STYLE)}`,
  "connect-src 'self'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');
