"""A small hand-written stand-in for JSONSchemaBench (issue 27): schemas shaped like those of
its subsets (GitHub, Kubernetes, Snowplow, Washington Post, JSON Schema Store, GlaiveAI
function calls), written here because the benchmark's data (Hugging Face / GitHub) cannot be
fetched from this machine. Each schema has instances, valid and invalid; bench_schema.py
checks every label with the `jsonschema` package before using it.

Entries: (subset, name, schema, valid, invalid). Instances are Python values (serialized
compactly, keys in the order written here) or, as RawText, exact JSON text."""


class RawText(str):
    pass


D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"

CORPUS = [
    # ---- GitHub-like: draft 4/7, ids, definitions, formats, enums, patterns
    ("github", "package-manifest", {
        "$schema": D7, "$id": "https://example.com/pkg.json", "title": "Package", "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 40},
            "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
            "license": {"enum": ["MIT", "Apache-2.0", "BSD-3-Clause"]},
            "homepage": {"type": "string", "format": "uri"},
            "private": {"type": "boolean", "default": False},
            "keywords": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 5}},
        "required": ["name", "version"], "additionalProperties": False},
     [{"name": "tpd", "version": "1.2.3"}, {"name": "a-b", "version": "0.0.1", "license": "MIT",
                                           "homepage": "https://x.org/p", "keywords": ["llm"]}],
     [{"name": "Bad Name", "version": "1.0.0"}, {"name": "x"}, {"name": "x", "version": "1.0.0", "extra": 1},
      {"name": "x", "version": "1.0.0", "license": "GPL"}]),
    ("github", "ci-workflow", {
        "$schema": D4, "id": "http://example.com/ci#", "type": "object", "x-generated": True,
        "definitions": {"step": {"type": "object", "properties": {
            "name": {"type": "string"}, "run": {"type": "string"}, "uses": {"type": "string"}},
            "oneOf": [{"required": ["run"], "properties": {"uses": False}},
                      {"required": ["uses"], "properties": {"run": False}}]}},
        "properties": {"on": {"enum": ["push", "pull_request"]},
                       "steps": {"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/step"}}},
        "required": ["on", "steps"]},
     [{"on": "push", "steps": [{"name": "b", "run": "make"}]}, {"on": "pull_request", "steps": [{"uses": "x@v1"}]}],
     [{"on": "push", "steps": []}, {"on": "push", "steps": [{"run": "a", "uses": "b"}]}, {"on": "tag", "steps": [{"run": "a"}]}]),
    ("github", "bounded-config", {
        "type": "object", "properties": {
            "timeout": {"type": "number", "minimum": 0.5, "maximum": 30},
            "retries": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
        "required": ["timeout"], "additionalProperties": False},
     [{"timeout": 2.5}, {"timeout": 30, "retries": 9, "ratio": 0.25}],
     [{"timeout": 0.4}, {"timeout": 1, "retries": 10}, {"timeout": 1, "ratio": 0}]),
    ("github", "tags-unique", {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True,
                                                  "items": {"enum": ["bug", "feature", "docs"]}}}},
     [{"tags": ["bug", "docs"]}, {"tags": []}], [{"tags": ["bug", "bug"]}, {"tags": ["other"]}]),
    ("github", "map-of-strings", {
        "type": "object", "properties": {"env": {"type": "object", "additionalProperties": {"type": "string"}}}},
     [{"env": {"A": "1", "PATH": "/bin"}}, {"env": {}}], [{"env": {"A": 1}}]),
    # ---- Kubernetes-like: x-kubernetes-* extensions, int-or-string, nested objects, descriptions
    ("kubernetes", "container-port", {
        "description": "ContainerPort", "type": "object", "x-kubernetes-map-type": "atomic",
        "properties": {
            "containerPort": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535},
            "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "x-kubernetes-patch-strategy": "merge"},
            "name": {"type": "string", "maxLength": 15}},
        "required": ["containerPort"]},
     [{"containerPort": 80}, {"containerPort": 65535, "protocol": "UDP", "name": "dns"}],
     [{"containerPort": 0}, {"protocol": "TCP"}, {"containerPort": 80, "protocol": "ICMP"}]),
    ("kubernetes", "int-or-string", {
        "type": "object", "properties": {"maxSurge": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                                      "x-kubernetes-int-or-string": True}}},
     [{"maxSurge": 1}, {"maxSurge": "25%"}], [{"maxSurge": 1.5}, {"maxSurge": None}]),
    ("kubernetes", "object-meta", {
        "type": "object", "properties": {
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 63},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "creationTimestamp": {"type": "string", "format": "date-time"}}, "required": ["name"]},
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}}},
        "required": ["metadata"]},
     [{"metadata": {"name": "web"}}, {"metadata": {"name": "w", "labels": {"app": "x"},
                                                   "creationTimestamp": "2024-02-29T10:00:00Z"},
                                      "spec": {"replicas": 3}}],
     [{"spec": {}}, {"metadata": {"name": "w", "labels": {"app": 1}}}, {"metadata": {"name": "w"},
                                                                       "spec": {"replicas": -1}}]),
    # ---- Snowplow-like: self blocks, draft 4, bounded strings, maxLength large, nulls
    ("snowplow", "link-click", {
        "$schema": "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#",
        "self": {"vendor": "com.example", "name": "link_click", "format": "jsonschema", "version": "1-0-0"},
        "type": "object", "properties": {
            "targetUrl": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 4096},
            "elementId": {"type": ["string", "null"], "maxLength": 255},
            "elementClasses": {"type": ["array", "null"], "items": {"type": "string"}}},
        "required": ["targetUrl"], "additionalProperties": False},
     [{"targetUrl": "https://a.com/x"}, {"targetUrl": "http://b.org", "elementId": None, "elementClasses": ["c"]}],
     [{"elementId": "x"}, {"targetUrl": "https://a.com", "elementId": 5}]),
    ("snowplow", "purchase", {
        "self": {"vendor": "com.example", "name": "purchase", "format": "jsonschema", "version": "1-0-0"},
        "type": "object", "properties": {
            "orderId": {"type": "string", "maxLength": 255},
            "total": {"type": "number", "minimum": 0, "maximum": 100000},
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "placedAt": {"type": "string", "format": "date"}},
        "required": ["orderId", "total"]},
     [{"orderId": "A1", "total": 19.99}, {"orderId": "B", "total": 0, "currency": "EUR", "placedAt": "2023-12-31"}],
     [{"orderId": "A1", "total": -1}, {"orderId": "A1", "total": 1, "currency": "eur"},
      {"orderId": "A", "total": 1, "placedAt": "2023-02-30"}]),
    # ---- Washington Post-like: allOf composition, enums, nested content elements
    ("washingtonpost", "content-element", {
        "definitions": {"base": {"type": "object", "properties": {"_id": {"type": "string"},
                                                                  "type": {"type": "string"}},
                                 "required": ["type"]}},
        "allOf": [{"$ref": "#/definitions/base"},
                  {"properties": {"type": {"enum": ["text", "image"]}, "content": {"type": "string"},
                                  "width": {"type": "integer", "minimum": 1}}}]},
     [{"type": "text", "content": "hi"}, {"_id": "x", "type": "image", "width": 640}],
     [{"content": "x"}, {"type": "video"}, {"type": "image", "width": 0}]),
    ("washingtonpost", "byline", {
        "type": "object", "properties": {
            "by": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "url": {"type": "string", "format": "uri-reference"}},
                "required": ["name"]}},
            "date": {"type": "string", "format": "date-time"}}},
     [{"by": [{"name": "A", "url": "/people/a"}], "date": "2024-01-31T00:00:00+01:00"}, {}],
     [{"by": [{"url": "/x"}]}, {"by": "A"}]),
    # ---- JSON Schema Store-like: patternProperties, dependencies, if/then, propertyNames
    ("schemastore", "tool-config", {
        "$schema": D7, "type": "object", "properties": {
            "extends": {"type": "string"}, "strict": {"type": "boolean"},
            "rules": {"type": "object", "patternProperties": {"^[a-z-]+$": {"enum": ["off", "warn", "error"]}},
                      "additionalProperties": False}},
        "dependencies": {"strict": ["extends"]}},
     [{"extends": "base", "strict": True}, {"rules": {}}, {"extends": "x"}],
     [{"strict": True}, {"rules": {"no-var": "maybe"}}, {"rules": {"NoVar": "off"}}]),
    ("schemastore", "conditional", {
        "type": "object", "properties": {"kind": {"enum": ["file", "dir"]}, "size": {"type": "integer"}},
        "required": ["kind"], "if": {"properties": {"kind": {"const": "file"}}}, "then": {"required": ["size"]}},
     [{"kind": "file", "size": 3}], [{"kind": "file"}, {"size": 3}]),
    ("schemastore", "names", {
        "type": "object", "properties": {"ab": {"type": "integer"}, "Ab": {"type": "integer"}},
        "propertyNames": {"pattern": "^[a-z]+$"}, "minProperties": 1},
     [{"ab": 1}], [{}, {"Ab": 1}]),
    # ---- GlaiveAI-like function-call parameters
    ("glaive", "get-weather", {
        "type": "object", "properties": {
            "location": {"type": "string", "description": "City and country"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]},
     [{"location": "Paris, FR"}, {"location": "Oslo", "unit": "celsius"}],
     [{"unit": "celsius"}, {"location": "Oslo", "unit": "kelvin"}, {"location": 3}]),
    ("glaive", "send-email", {
        "type": "object", "properties": {
            "to": {"type": "string", "format": "email"}, "subject": {"type": "string"},
            "cc": {"type": "array", "items": {"type": "string", "format": "email"}},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["to", "subject"]},
     [{"to": "a@b.c", "subject": "hi"}, {"to": "x.y@ex.org", "subject": "s", "cc": ["c@d.ef"], "priority": 5}],
     [{"to": "a@b.c"}, {"to": "a@b.c", "subject": "s", "priority": 6}]),
    ("glaive", "search", {
        "type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "default": 10},
            "filters": {"type": "object", "properties": {
                "from": {"type": "string", "format": "date"}, "to": {"type": "string", "format": "date"}}}},
        "required": ["query"]},
     [{"query": "q"}, {"query": "q", "limit": 3, "filters": {"from": "2020-01-01"}}],
     [{"limit": 3}, {"query": "q", "filters": {"from": "yesterday"}}]),
]
