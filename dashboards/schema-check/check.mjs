// Type-checks every dashboard in dashboards/ against Grafana's own
// dashboard types (@grafana/schema): the dashboard, each of its panels with
// the options and custom field config of its panel type, and nothing more
// than those types allow (TypeScript's excess property check). It writes
// one TypeScript file of typed literals and reports the compiler's errors
// against the dashboard file and panel they came from.
//
//   node check.mjs            (after npm ci; make dashboards-check does both)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const here = path.dirname(fileURLToPath(import.meta.url));
const dashboardsDir = path.dirname(here);
const schema = path.join(here, 'node_modules', '@grafana', 'schema', 'dist', 'esm');
const composable = path.join(schema, 'raw', 'composable');

// Where @grafana/schema is known to lag Grafana: keys Grafana itself
// writes and reads that the generated types lack. Each is taken out of the
// dashboard before the check, with why; keep this list short.
const knownLags = [
  {
    key: 'templating.list[].definition',
    why: "Grafana's query variables keep the query editor's text in definition " +
      '(QueryVariableModel in @grafana/data); the schema\'s VariableModel lacks it',
    strip: (d) => (d.templating?.list ?? []).forEach((v) => delete v.definition),
  },
];

// The types module of a panel type, e.g. stat -> .../stat/panelcfg/x/StatPanelCfg_types.gen.
function panelTypes(type) {
  const dir = path.join(composable, type.toLowerCase(), 'panelcfg', 'x');
  if (!fs.existsSync(dir)) return null;
  const file = fs.readdirSync(dir).find((f) => f.endsWith('_types.gen.d.ts'));
  if (!file) return null;
  const text = fs.readFileSync(path.join(dir, file), 'utf8');
  return {
    module: path.relative(path.join(here, 'node_modules'), path.join(dir, file.replace(/\.d\.ts$/, ''))).split(path.sep).join('/'),
    hasOptions: /export interface Options\b/.test(text),
    hasFieldConfig: /export interface FieldConfig\b/.test(text),
  };
}

const files = fs.readdirSync(dashboardsDir).filter((f) => f.endsWith('.json')).sort();
if (files.length === 0) {
  console.error(`no dashboards in ${dashboardsDir}`);
  process.exit(1);
}

const imports = new Map(); // panel type -> identifier
const chunks = []; // { header, text }
const notes = [];

function typeOfPanel(p) {
  if (p.type === 'row') return 'RowPanel';
  const t = panelTypes(p.type);
  if (!t || !t.hasOptions) {
    notes.push(`panel type ${p.type} has no types in @grafana/schema: checked as a generic panel`);
    return 'Panel';
  }
  if (!imports.has(p.type)) imports.set(p.type, { id: `t_${imports.size}`, ...t });
  const { id, hasFieldConfig } = imports.get(p.type);
  const custom = hasFieldConfig ? `${id}.FieldConfig` : 'Record<string, never>';
  return `Omit<Panel<${id}.Options, ${custom}>, 'options'> & { options: ${id}.Options }`;
}

for (const file of files) {
  const dashboard = JSON.parse(fs.readFileSync(path.join(dashboardsDir, file), 'utf8'));
  for (const lag of knownLags) lag.strip(dashboard);
  const { panels = [], ...rest } = dashboard;
  chunks.push({ header: `${file}`, decl: `Omit<Dashboard, 'panels'>`, value: rest });
  const walk = (list, prefix) =>
    list.forEach((p, i) => {
      const where = `${prefix}[${i}]`;
      chunks.push({ header: `${file} ${where} "${p.title ?? ''}" (${p.type})`, decl: typeOfPanel(p), value: p });
      if (p.type === 'row' && Array.isArray(p.panels)) walk(p.panels, `${where}.panels`);
    });
  walk(panels, 'panels');
}

let source = `import type { Dashboard, Panel, RowPanel } from '@grafana/schema';\n`;
for (const [, { id, module }] of imports) source += `import type * as ${id} from '${module}';\n`;
// JSON has strings where the types have string enums (ThresholdsMode and
// the like): accept each enum's values, and nothing else.
source += `type Json<T> = T extends string ? \`\${T}\` : T extends Array<infer U> ? Array<Json<U>> : T extends object ? { [K in keyof T]: Json<T[K]> } : T;\n`;
const starts = []; // [first line, header]
chunks.forEach((c, i) => {
  starts.push([source.split('\n').length, c.header]);
  source += `// ${c.header}\nexport const c${i}: Json<${c.decl}> = ${JSON.stringify(c.value, null, 2)};\n`;
});

const outDir = path.join(here, '.generated');
fs.mkdirSync(outDir, { recursive: true });
const generated = path.join(outDir, 'dashboards.gen.ts');
fs.writeFileSync(generated, source);

const program = ts.createProgram([generated], {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Node10,
  target: ts.ScriptTarget.ES2022,
  baseUrl: here,
});
let failures = 0;
for (const d of ts.getPreEmitDiagnostics(program)) {
  let text = ts.flattenDiagnosticMessageText(d.messageText, '\n  ');
  // The expected type can run to pages; its start names the mismatch.
  if (text.length > 400) text = text.slice(0, 400) + '…';
  let where = 'schema check';
  if (d.file && d.start !== undefined) {
    const line = d.file.getLineAndCharacterOfPosition(d.start).line + 1;
    for (const [first, header] of starts) if (first <= line) where = `${header} (${path.relative(dashboardsDir, generated)}:${line})`;
  }
  console.error(`${where}:\n  ${text}`);
  failures++;
}
for (const n of new Set(notes)) console.log(`note: ${n}`);
for (const lag of knownLags) console.log(`not checked: ${lag.key}: ${lag.why}`);
if (failures > 0) {
  console.error(`${failures} schema error(s) in ${files.length} dashboard(s) (@grafana/schema ${schemaVersion()})`);
  process.exit(1);
}
console.log(`${files.length} dashboard(s), ${chunks.length - files.length} panel(s): valid against @grafana/schema ${schemaVersion()}`);

function schemaVersion() {
  return JSON.parse(fs.readFileSync(path.join(here, 'node_modules', '@grafana', 'schema', 'package.json'), 'utf8')).version;
}
