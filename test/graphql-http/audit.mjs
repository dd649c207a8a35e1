// Runs graphql-http's auditServer against URL (voucherd's /graphql) and
// prints one JSON line per audit: {id, name, status, reason}. status is
// "ok", "warn" (a SHOULD not met) or "error" (a MUST not met). Exits 0 when
// it ran, whatever the results: the Go test judges them.
import { auditServer } from "graphql-http";

const url = process.env.URL;
if (!url) {
  console.error("URL is required");
  process.exit(2);
}
const results = await auditServer({ url });
for (const r of results) {
  const line = { id: r.id, name: r.name, status: r.status };
  if (r.status !== "ok") {
    line.reason = r.reason;
    if (r.response) {
      line.responseStatus = r.response.status;
      try {
        line.responseBody = await r.response.clone().text();
      } catch (e) {}
      line.responseContentType = r.response.headers.get("content-type");
    }
  }
  console.log(JSON.stringify(line));
}
