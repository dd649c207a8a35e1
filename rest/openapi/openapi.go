// Package openapi builds the REST door's OpenAPI 3.1 document and keeps it in
// step with the routes.
//
// rest/openapi.yaml holds what only a person can write: each operation's
// summary, parameters, request body, its success answer with an example and
// the errors particular to it. Generate adds what the route table
// (rest.Routes) decides, so it cannot drift: the security of the route's
// token guard, the Idempotency-Key parameter, `Idempotent-Replayed` and the
// 409/422 answers and 413 of every POST, 400 everywhere (path and query
// text rules),
// 401/403 where a token is needed, 429 where a rate limit applies, 500
// everywhere. Check lists every way the document and the routes disagree.
// `make generate` (cmd/openapigen) writes rest/openapi.json; tests fail when
// it is stale or Check finds anything.
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/voucherd/voucherd/rest"
)

// SourcePath and OutputPath are the document's files, from the module root.
const (
	SourcePath = "rest/openapi.yaml"
	OutputPath = "rest/openapi.json"
)

type obj = map[string]any

// Generate turns the YAML source into the served JSON document, completing
// each route's operation from routes. It fails, naming every problem, when
// Check finds the document and the routes out of step.
func Generate(source []byte, routes []rest.Route) ([]byte, error) {
	var doc obj
	if err := yaml.Unmarshal(source, &doc); err != nil {
		return nil, fmt.Errorf("openapi: %s: %w", SourcePath, err)
	}
	if problems := Check(doc, routes); len(problems) > 0 {
		return nil, fmt.Errorf("openapi: %s and the routes (rest.Routes) disagree:\n  %s", SourcePath, strings.Join(problems, "\n  "))
	}
	comps, _ := doc["components"].(obj)
	for _, r := range routes {
		complete(operation(doc, r.Path, r.Method), r, comps)
	}
	dropUnused(doc, "responses")
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Parse decodes a JSON or YAML document for Check.
func Parse(b []byte) (map[string]any, error) {
	var doc obj
	err := yaml.Unmarshal(b, &doc)
	return doc, err
}

func operation(doc obj, path, method string) obj {
	paths, _ := doc["paths"].(obj)
	item, _ := paths[path].(obj)
	op, _ := item[strings.ToLower(method)].(obj)
	return op
}

func ref(name string) obj { return obj{"$ref": name} }

// complete adds the route table's parts to op.
func complete(op obj, r rest.Route, comps obj) {
	switch r.Token {
	case "none":
		op["security"] = []any{}
	case "widget-client":
		op["security"] = []any{obj{"clientSecret": []any{}}, obj{"bearerAuth": []any{}}}
	default:
		op["security"] = []any{obj{"bearerAuth": []any{}}}
	}
	if r.Group != "" {
		op["x-rate-limit-group"] = r.Group
	}
	responses, _ := op["responses"].(obj)
	add := func(status, component string) {
		if _, ok := responses[status]; !ok {
			responses[status] = ref("#/components/responses/" + component)
		}
	}
	params, _ := op["parameters"].([]any)
	// Every route checks the text of its path and query (no NUL, valid
	// UTF-8) before anything else reads them: any request may be a 400.
	add("400", "BadRequest")
	if r.Method == "POST" {
		op["parameters"] = append(params, ref("#/components/parameters/IdempotencyKey"))
		add("400", "BadRequest")
		add("409", "IdempotencyConflict")
		add("413", "PayloadTooLarge")
		add("422", "IdempotencyKeyReused")
		for status, resp := range responses {
			if !strings.HasPrefix(status, "2") {
				continue
			}
			resp := inline(resp.(obj), comps)
			headers, _ := resp["headers"].(obj)
			if headers == nil {
				headers = obj{}
			}
			headers["Idempotent-Replayed"] = ref("#/components/headers/IdempotentReplayed")
			resp["headers"] = headers
			responses[status] = resp
		}
	}
	if r.Token != "none" {
		add("401", "Unauthorized")
		add("403", "Forbidden")
	}
	if r.Group != "" {
		add("429", "TooManyRequests")
	}
	add("500", "Internal")
}

// inline returns a copy of a response, the component it refers to resolved.
func inline(resp obj, comps obj) obj {
	if name, ok := resp["$ref"].(string); ok {
		responses, _ := comps["responses"].(obj)
		target, _ := responses[strings.TrimPrefix(name, "#/components/responses/")].(obj)
		resp = target
	}
	out := obj{}
	for k, v := range resp {
		out[k] = v
	}
	if h, ok := out["headers"].(obj); ok {
		copied := obj{}
		for k, v := range h {
			copied[k] = v
		}
		out["headers"] = copied
	}
	return out
}

// dropUnused removes components of kind that nothing refers to any more
// (responses every use of which was inlined to add POST headers).
func dropUnused(doc obj, kind string) {
	comps, _ := doc["components"].(obj)
	section, _ := comps[kind].(obj)
	all, _ := json.Marshal(doc)
	for name := range section {
		ref, _ := json.Marshal("#/components/" + kind + "/" + name)
		if !bytes.Contains(all, ref) {
			delete(section, name)
		}
	}
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

var wildcard = regexp.MustCompile(`\{([^}.]+)(\.\.\.)?\}`)

// Check lists every way doc and routes disagree, each naming the route
// and what to change.
func Check(doc map[string]any, routes []rest.Route) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		bad("the document declares openapi %q; it must be 3.1.x", v)
	}
	paths, _ := doc["paths"].(obj)
	comps, _ := doc["components"].(obj)
	served := map[string]bool{}
	for _, r := range routes {
		key := r.Method + " " + r.Path
		served[key] = true
		op := operation(doc, r.Path, r.Method)
		if op == nil {
			bad("%s (route %q) has no operation: add paths.%q.%s to %s", key, r.Pattern, r.Path, strings.ToLower(r.Method), SourcePath)
			continue
		}
		if id, _ := op["operationId"].(string); id == "" {
			bad("%s: no operationId", key)
		}
		if s, _ := op["summary"].(string); s == "" {
			bad("%s: no summary", key)
		}
		// Path parameters: exactly the pattern's wildcards.
		var want, got []string
		for _, m := range wildcard.FindAllStringSubmatch(r.Path, -1) {
			want = append(want, m[1])
		}
		item, _ := paths[r.Path].(obj)
		for _, list := range [][]any{asList(item["parameters"]), asList(op["parameters"])} {
			for _, p := range list {
				p := resolve(p, comps, "parameters")
				if p["in"] == "path" {
					got = append(got, fmt.Sprint(p["name"]))
					if p["required"] != true {
						bad("%s: path parameter %v must be required", key, p["name"])
					}
				}
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(want, got) {
			bad("%s: path parameters %v, the route has %v", key, got, want)
		}
		if sec, ok := op["security"]; ok {
			open := len(asList(sec)) == 0
			if open != (r.Token == "none") {
				bad("%s: security %v, but the route's token guard is %q (leave security out: it is generated)", key, sec, r.Token)
			}
		}
		if _, ok := op["requestBody"]; ok != (r.Method == "POST") {
			if ok {
				bad("%s: a requestBody on a route that reads none", key)
			} else {
				bad("%s: no requestBody (every POST reads one; use #/components/requestBodies/Empty for none)", key)
			}
		}
		responses, _ := op["responses"].(obj)
		success := false
		for status, resp := range responses {
			resp := resolve(resp, comps, "responses")
			if status == "200" || status == "201" || status == "204" {
				success = true
				if content, ok := resp["content"].(obj); ok {
					for media, mt := range content {
						mt, _ := mt.(obj)
						if mt["example"] == nil && mt["examples"] == nil {
							bad("%s: answer %s (%s) has no example", key, status, media)
						}
					}
				}
				continue
			}
			if !strings.HasPrefix(status, "4") && !strings.HasPrefix(status, "5") {
				bad("%s: answer %s is neither a success nor an error", key, status)
				continue
			}
			content, _ := resp["content"].(obj)
			mt, _ := content["application/json"].(obj)
			schema, _ := mt["schema"].(obj)
			if schema["$ref"] != "#/components/schemas/Error" {
				bad("%s: error answer %s must have the Error schema as application/json", key, status)
			}
			if mt["example"] == nil && mt["examples"] == nil {
				bad("%s: error answer %s has no example", key, status)
			}
		}
		if !success {
			bad("%s: no success answer (200)", key)
		}
	}
	for path, item := range paths {
		item, _ := item.(obj)
		for _, m := range methods {
			if _, ok := item[m]; ok && !served[strings.ToUpper(m)+" "+path] {
				bad("%s %s is documented but no route serves it: remove it from %s or register the route", strings.ToUpper(m), path, SourcePath)
			}
		}
	}
	sort.Strings(problems)
	return problems
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// resolve follows a local $ref into components.<kind>.
func resolve(v any, comps obj, kind string) obj {
	m, _ := v.(obj)
	if name, ok := m["$ref"].(string); ok {
		section, _ := comps[kind].(obj)
		target, _ := section[strings.TrimPrefix(name, "#/components/"+kind+"/")].(obj)
		return target
	}
	return m
}
