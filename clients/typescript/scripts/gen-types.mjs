#!/usr/bin/env node
// Generates src/types.generated.ts from the JSON Schemas in docs/schemas (two directories
// up from this package): one interface per schema, named after its title in PascalCase
// (`conversation.ended` -> ConversationEnded, `world.npc_moved` -> WorldNpcMoved), and one
// type per `$defs` entry (NpcInfo, Persona, ...; shared definitions are emitted once).
// Field names are exactly those of the JSON; descriptions become doc comments.
//
//   node scripts/gen-types.mjs          writes src/types.generated.ts
//   node scripts/gen-types.mjs --check  exits 1 when the committed file differs
//
// The unit tests import generate() and compare its output with the committed file, so the
// types cannot drift from the schemas.

import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGE_DIR = resolve(here, "..");
export const SCHEMA_DIR = resolve(PACKAGE_DIR, "..", "..", "docs", "schemas");
export const OUTPUT = join(PACKAGE_DIR, "src", "types.generated.ts");

/** `world.npc_moved` -> `WorldNpcMoved`. */
export function typeName(title) {
  return title
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((word) => word[0].toUpperCase() + word.slice(1))
    .join("");
}

function docComment(lines, indent) {
  const present = lines.filter((line) => line !== undefined && line !== "");
  const prose = present.filter((line) => !line.startsWith("@"));
  const tags = present.filter((line) => line.startsWith("@"));
  const text = [...prose, ...(tags.length ? [tags.join("\n")] : [])].join("\n\n");
  if (!text) return "";
  const body = text.replace(/\*\//g, "*\\/").split("\n");
  if (body.length === 1) return `${indent}/** ${body[0]} */\n`;
  return `${indent}/**\n${body.map((line) => `${indent} *${line ? " " + line : ""}`).join("\n")}\n${indent} */\n`;
}

function schemaDoc(schema) {
  const lines = [schema.description];
  if (schema.format) lines.push(`@format ${schema.format}`);
  if (schema.default !== undefined) lines.push(`@default ${JSON.stringify(schema.default)}`);
  return lines;
}

function literal(value) {
  return JSON.stringify(value);
}

function isIdentifier(name) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name);
}

/** The TypeScript type of a (sub)schema, `indent` being the indentation of its line. */
function tsType(schema, indent, file) {
  if (schema === true || schema === undefined || (typeof schema === "object" && Object.keys(schema).length === 0)) {
    return "unknown";
  }
  if (schema.$ref) {
    const match = /^#\/\$defs\/(.+)$/.exec(schema.$ref);
    if (!match) throw new Error(`${file}: unsupported $ref ${schema.$ref}`);
    return match[1];
  }
  if (schema.const !== undefined) return literal(schema.const);
  if (schema.enum) return schema.enum.map(literal).join(" | ");
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) {
    return [...new Set(alternatives.map((alt) => tsType(alt, indent, file)))].join(" | ");
  }
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  const parts = types.map((type) => {
    switch (type) {
      case "string":
        return "string";
      case "integer":
      case "number":
        return "number";
      case "boolean":
        return "boolean";
      case "null":
        return "null";
      case "array": {
        const item = tsType(schema.items ?? true, indent, file);
        return /[|&]/.test(item) ? `Array<${item}>` : `${item}[]`;
      }
      case "object":
        return objectType(schema, indent, file);
      case undefined:
        return "unknown";
      default:
        throw new Error(`${file}: unsupported type ${type}`);
    }
  });
  return parts.join(" | ");
}

/** `{ ... }` for an object schema (the body of an interface when `asBody`). */
function objectType(schema, indent, file) {
  const inner = indent + "  ";
  const required = new Set(schema.required ?? []);
  let out = "{\n";
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    out += docComment(schemaDoc(property), inner);
    const key = isIdentifier(name) ? name : literal(name);
    out += `${inner}${key}${required.has(name) ? "" : "?"}: ${tsType(property, inner, file)};\n`;
  }
  const extra = schema.additionalProperties;
  if (extra === true) {
    out += `${inner}/** Fields the schema does not list (additionalProperties: true). */\n`;
    out += `${inner}[key: string]: unknown;\n`;
  } else if (extra && typeof extra === "object") {
    out += `${inner}[key: string]: ${tsType(extra, inner, file)};\n`;
  }
  return out + `${indent}}`;
}

/** A named declaration: an interface for object schemas, a type alias otherwise. */
function declaration(name, schema, file, extraDoc) {
  const doc = docComment([...(extraDoc ?? []), schema.description], "");
  const isObject = schema.type === "object" && !schema.anyOf && !schema.oneOf;
  const body = isObject ? `export interface ${name} ${objectType(schema, "", file)}\n` : `export type ${name} = ${tsType(schema, "", file)};\n`;
  return { doc, body };
}

/** The generated module, from the schemas in `schemaDir`. */
export function generate(schemaDir = SCHEMA_DIR) {
  const files = readdirSync(schemaDir)
    .filter((file) => file.endsWith(".schema.json"))
    .sort();
  if (files.length === 0) throw new Error(`no *.schema.json in ${schemaDir}`);
  const defs = new Map(); // name -> { body, doc, file }
  const messages = [];
  const titles = [];
  for (const file of files) {
    const schema = JSON.parse(readFileSync(join(schemaDir, file), "utf8"));
    const title = schema.title ?? file.replace(/\.schema\.json$/, "");
    const name = typeName(title);
    for (const [defName, def] of Object.entries(schema.$defs ?? {})) {
      const generated = declaration(defName, def, file);
      const seen = defs.get(defName);
      if (seen && seen.body !== generated.body) {
        throw new Error(`$defs/${defName} differs between ${seen.file} and ${file}`);
      }
      if (!seen) defs.set(defName, { ...generated, file });
    }
    const generated = declaration(name, schema, file, [`\`${title}\` (docs/schemas/${file}).`]);
    messages.push({ name, ...generated });
    titles.push([name, title]);
  }
  for (const { name } of messages) {
    if (defs.has(name)) throw new Error(`type name ${name} is both a schema and a $defs entry`);
  }
  let out =
    "// Generated by scripts/gen-types.mjs from docs/schemas/*.schema.json. Do not edit:\n" +
    "// change the schemas (they are generated from the Rust wire types) and run\n" +
    "// `npm run gen-types`. `npm test` fails when this file is out of date.\n" +
    "/* eslint-disable */\n\n";
  out += "// ---- Shared definitions ($defs) ----\n\n";
  for (const name of [...defs.keys()].sort()) {
    const { doc, body } = defs.get(name);
    out += doc + body + "\n";
  }
  out += "// ---- Messages, one per schema ----\n\n";
  for (const { doc, body } of messages) out += doc + body + "\n";
  out += "/** The schema title (the subject after the prefix, for messages) of each message type. */\n";
  out += "export const SCHEMA_TITLES = {\n";
  for (const [name, title] of titles) out += `  ${name}: ${literal(title)},\n`;
  out += "} as const;\n";
  return out;
}

const invokedDirectly = process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  const text = generate();
  if (process.argv.includes("--check")) {
    let committed = "";
    try {
      committed = readFileSync(OUTPUT, "utf8");
    } catch {
      // missing counts as different
    }
    if (committed !== text) {
      console.error(`${OUTPUT} is out of date; run: npm run gen-types`);
      process.exit(1);
    }
    console.log(`${OUTPUT} is up to date`);
  } else {
    writeFileSync(OUTPUT, text);
    console.log(`wrote ${OUTPUT}`);
  }
}
