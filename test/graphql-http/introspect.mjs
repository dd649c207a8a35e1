// Sends graphql-js's standard introspection query, every option on (what
// GraphiQL, graphql-inspector and code generators send), to URL, builds a
// client schema from the answer (which validates it) and prints it as SDL,
// sorted, on stdout. With SCHEMA_FILE it also prints that SDL file the
// same way, after a line "---", so the caller can compare the two.
import { readFileSync } from "node:fs";
import {
  buildClientSchema,
  buildSchema,
  getIntrospectionQuery,
  lexicographicSortSchema,
  printSchema,
} from "graphql";

const url = process.env.URL;
const query = getIntrospectionQuery({
  descriptions: true,
  specifiedByUrl: true,
  directiveIsRepeatable: true,
  schemaDescription: true,
  inputValueDeprecation: true,
  oneOf: true,
});
const res = await fetch(url, {
  method: "POST",
  headers: { "content-type": "application/json", accept: "application/graphql-response+json" },
  body: JSON.stringify({ query, operationName: "IntrospectionQuery" }),
});
const body = await res.json();
if (res.status !== 200 || body.errors || !body.data) {
  console.error(`introspection failed: ${res.status} ${JSON.stringify(body).slice(0, 2000)}`);
  process.exit(1);
}
const schema = buildClientSchema(body.data);
console.log(printSchema(lexicographicSortSchema(schema)));
if (process.env.SCHEMA_FILE) {
  console.log("---");
  const sdl = readFileSync(process.env.SCHEMA_FILE, "utf8");
  console.log(printSchema(lexicographicSortSchema(buildSchema(sdl))));
}
