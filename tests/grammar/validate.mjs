// The corpus walks checked with a standard validator: every text grammar_walks wrote must be complete, parse as JSON
// and validate against its schema with ajv (JSON Schema 2020-12), and every schema must have walks.
//   node validate.mjs SCHEMAS.json WALKS.json   (ajv from scripts/setup.d/server.sh, in .cache/server-node)
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const root = process.env.PLUMB_SOURCE_DIR ?? process.cwd();
const require = createRequire(path.join(root, ".cache/server-node/package.json"));
const Ajv2020 = require("ajv/dist/2020").default;

const [schemasFile, walksFile] = process.argv.slice(2);
const schemas = JSON.parse(fs.readFileSync(schemasFile, "utf8"));
const walks = JSON.parse(fs.readFileSync(walksFile, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = schemas.map((s) => ajv.compile(s));

let failures = 0;
const walked = new Set();
for (const w of walks) {
  const where = `schema ${w.schema} (${JSON.stringify(schemas[w.schema])}), ${w.vocabulary}, seed ${w.seed}`;
  walked.add(w.schema);
  let value;
  try {
    if (!w.complete) throw new Error("the walk did not end");
    value = JSON.parse(w.text);
  } catch (e) {
    console.log(`FAIL ${where}: ${e.message}: ${JSON.stringify(w.text)}`);
    failures++;
    continue;
  }
  if (!validators[w.schema](value)) {
    console.log(`FAIL ${where}: ${JSON.stringify(w.text)}: ${ajv.errorsText(validators[w.schema].errors)}`);
    failures++;
  }
}
for (let i = 0; i < schemas.length; i++) {
  if (!walked.has(i)) {
    console.log(`FAIL schema ${i} has no walks`);
    failures++;
  }
}
console.log(`validate: ${walks.length} texts over ${schemas.length} schemas, ${failures} failures`);
process.exit(failures === 0 && schemas.length >= 100 ? 0 : 1);
