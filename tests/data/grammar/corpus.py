"""The structured-output corpus (see README.md here): JSON Schemas, regexes and GBNF grammars
with the prompts the corpus test sends. Hand-written; the "source" of each schema names the
public API or tool definition it models (trimmed to what matters for a request)."""

PROMPTS = [
    "Give me an example of {topic} as JSON.",
    "Write {topic} in JSON for a unit test. Keep the strings short.",
    "Reply with JSON only: {topic}.",
]

# Schemas whose instances have no size bound (recursion, maps, unbounded strings in a
# pattern): greedy SmolLM2 can repeat itself inside them until max_tokens (measured: 12 of
# 180 outputs in the first full run, all in these, none invalid). Their requests carry
# frequency_penalty 1.0, which breaks the repetition (see README.md); one that would still run past
# max_tokens is ended within it by the closer (finish "length", a valid document), counted and printed.
OPEN_ENDED = {"hand:additional-schema", "hand:additional-true", "hand:recursive", "hand:empty-schema",
              "openai:ui-generation", "github-actions:step", "npm:package.json", "docker-compose:service",
              "k8s:configmap", "stripe:create-customer", "geojson:feature", "aws:s3-put-object",
              "sendgrid:mail-send", "hand:pattern-search"}

S = lambda **kw: {"type": "string", **kw}  # noqa: E731
I = lambda **kw: {"type": "integer", **kw}  # noqa: E731
N = lambda **kw: {"type": "number", **kw}  # noqa: E731
B = {"type": "boolean"}


def obj(props, required=None, **kw):
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **kw}


SCHEMAS = [
    # ---- hand-written: each keyword the issue lists
    ("hand:string", "a string", {"type": "string", "maxLength": 40}),
    ("hand:integer", "an integer", {"type": "integer"}),
    ("hand:number", "a number", {"type": "number"}),
    ("hand:boolean", "a boolean", {"type": "boolean"}),
    ("hand:null", "null", {"type": "null"}),
    ("hand:type-list", "a value that is a string or a number", {"type": ["string", "number"], "maxLength": 20}),
    ("hand:enum", "a color", {"enum": ["red", "green", "blue", 7, None]}),
    ("hand:const", "a version object", obj({"version": {"const": "1.0"}, "ok": B})),
    ("hand:required-subset", "a user profile", obj({"id": I(), "nick": S(maxLength=12), "bio": S(maxLength=30)},
                                                  ["id"])),
    ("hand:additional-false", "a point", obj({"x": N(), "y": N()}, additionalProperties=False)),
    ("hand:additional-schema", "a map of word counts",
     {"type": "object", "additionalProperties": {"type": "integer"}}),
    ("hand:additional-true", "a labelled record", obj({"label": S(maxLength=10)}, additionalProperties=True)),
    ("hand:items", "a list of numbers", {"type": "array", "items": {"type": "number"}, "maxItems": 5}),
    ("hand:prefix-items", "a coordinate pair with a name",
     {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}, S(maxLength=10)], "items": False}),
    ("hand:min-max-items", "a list of 2 to 3 tags",
     {"type": "array", "items": S(maxLength=8), "minItems": 2, "maxItems": 3}),
    ("hand:anyof", "a shape", {"anyOf": [obj({"circle": N()}), obj({"square": N()})]}),
    ("hand:oneof", "an id that is a number or a short code",
     {"oneOf": [{"type": "integer"}, {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}]}),
    ("hand:allof", "a named, dated event",
     {"allOf": [obj({"name": S(maxLength=20)}), obj({"date": S(format="date")})]}),
    ("hand:ref-defs", "an address book entry", {
        "$defs": {"addr": obj({"city": S(maxLength=15), "zip": S(pattern="^[0-9]{5}$")})},
        "type": "object", "properties": {"home": {"$ref": "#/$defs/addr"}, "work": {"$ref": "#/$defs/addr"}},
        "required": ["home"]}),
    ("hand:ref-definitions", "a rectangle", {
        "definitions": {"size": {"type": "integer", "minimum": 1, "maximum": 100}},
        "type": "object", "properties": {"w": {"$ref": "#/definitions/size"}, "h": {"$ref": "#/definitions/size"}},
        "required": ["w", "h"]}),
    ("hand:recursive", "a small tree", {
        "$defs": {"node": obj({"value": I(), "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                           "maxItems": 2}}, ["value"])},
        "$ref": "#/$defs/node"}),
    ("hand:lengths", "a username and a PIN",
     obj({"user": S(minLength=3, maxLength=10), "pin": S(pattern="^[0-9]{4}$")})),
    ("hand:pattern", "a hex color", obj({"hex": S(pattern="^#[0-9a-f]{6}$")})),
    ("hand:pattern-search", "a sentence mentioning a cat", obj({"text": S(pattern="cat")})),
    ("hand:formats", "a meeting", obj({"day": S(format="date"), "at": S(format="time"),
                                       "created": S(format="date-time"), "id": S(format="uuid"),
                                       "host": S(format="email")})),
    ("hand:int-range", "a dice roll and a temperature", obj({"roll": I(minimum=1, maximum=6),
                                                             "temp": I(minimum=-40, maximum=55)})),
    ("hand:int-exclusive", "a percentage", obj({"pct": I(exclusiveMinimum=0, exclusiveMaximum=100)})),
    ("hand:number-range", "a rating", obj({"stars": N(minimum=0, maximum=5)})),
    ("hand:nested", "an order", obj({
        "id": I(minimum=1), "customer": obj({"name": S(maxLength=20), "vip": B}),
        "lines": {"type": "array", "minItems": 1, "maxItems": 3,
                  "items": obj({"sku": S(pattern="^[A-Z]{2}[0-9]{3}$"), "qty": I(minimum=1, maximum=99)})}})),
    ("hand:nullable", "a person with an optional middle name",
     obj({"first": S(maxLength=12), "middle": {"type": ["string", "null"], "maxLength": 12}})),
    ("hand:empty-schema", "any JSON value", {}),
    ("hand:unicode", "a greeting in Japanese", obj({"greeting": S(maxLength=10), "lang": {"enum": ["ja", "en"]}})),
    ("hand:escapes", "a file path on Windows", obj({"path": S(maxLength=30)})),
    ("hand:deep", "a deeply nested config", obj({"a": obj({"b": obj({"c": obj({"d": obj({"e": I()})})})})})),
    ("hand:array-of-arrays", "a 2x2 matrix", {"type": "array", "minItems": 2, "maxItems": 2,
                                              "items": {"type": "array", "items": I(), "minItems": 2, "maxItems": 2}}),
    # ---- modelled on public API / tool definitions
    ("openai:get_current_weather", "a weather lookup request", obj({
        "location": S(description="The city and state, e.g. San Francisco, CA", maxLength=30),
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["location"])),
    ("openai:structured-outputs-math", "a math solution with steps", obj({
        "steps": {"type": "array", "maxItems": 3, "items": obj({"explanation": S(maxLength=40),
                                                                 "output": S(maxLength=20)})},
        "final_answer": S(maxLength=20)}, additionalProperties=False)),
    ("openai:ui-generation", "a UI component tree", {
        "$defs": {"ui": obj({"type": {"enum": ["div", "button", "header", "form", "field"]},
                             "label": S(maxLength=15),
                             "children": {"type": "array", "items": {"$ref": "#/$defs/ui"}, "maxItems": 2},
                             "attributes": {"type": "array", "maxItems": 2, "items": obj(
                                 {"name": S(maxLength=10), "value": S(maxLength=10)}, additionalProperties=False)}},
                            additionalProperties=False)},
        "$ref": "#/$defs/ui"}),
    ("openai:moderation", "a content moderation verdict", obj({
        "is_violating": B, "category": {"type": ["string", "null"], "enum": ["violence", "sexual", "self_harm", None]},
        "explanation_if_violating": {"type": ["string", "null"], "maxLength": 40}}, additionalProperties=False)),
    ("github:create-issue", "a GitHub issue to file", obj({
        "title": S(maxLength=40), "body": S(maxLength=60),
        "labels": {"type": "array", "items": S(maxLength=12), "maxItems": 3},
        "assignees": {"type": "array", "items": S(maxLength=12), "maxItems": 2},
        "milestone": {"type": ["integer", "null"]}}, ["title"])),
    ("github:create-pull-request", "a pull request", obj({
        "title": S(maxLength=40), "head": S(maxLength=20), "base": S(maxLength=20), "draft": B,
        "maintainer_can_modify": B}, ["title", "head", "base"])),
    ("github:repo-webhook", "a repository webhook config", obj({
        "name": {"const": "web"}, "active": B,
        "events": {"type": "array", "items": {"enum": ["push", "pull_request", "issues", "release"]}, "maxItems": 3},
        "config": obj({"url": S(maxLength=40), "content_type": {"enum": ["json", "form"]},
                       "insecure_ssl": {"enum": ["0", "1"]}}, ["url"])}, ["config"])),
    ("stripe:create-customer", "a Stripe customer", obj({
        "email": S(format="email"), "name": S(maxLength=25), "description": S(maxLength=40),
        "balance": I(), "metadata": {"type": "object", "additionalProperties": S(maxLength=20)},
        "address": obj({"line1": S(maxLength=30), "city": S(maxLength=20), "country": S(pattern="^[A-Z]{2}$"),
                        "postal_code": S(maxLength=10)}, ["line1"])}, ["email"])),
    ("stripe:payment-intent", "a payment intent", obj({
        "amount": I(minimum=50, maximum=99999999), "currency": {"enum": ["usd", "eur", "gbp", "jpy"]},
        "capture_method": {"enum": ["automatic", "manual"]}, "confirm": B,
        "payment_method_types": {"type": "array", "items": {"enum": ["card", "sepa_debit", "ideal"]}, "minItems": 1,
                                 "maxItems": 2}}, ["amount", "currency"])),
    ("slack:chat.postMessage", "a Slack message", obj({
        "channel": S(pattern="^C[A-Z0-9]{8}$"), "text": S(maxLength=60), "mrkdwn": B,
        "thread_ts": S(pattern="^[0-9]{10}\\.[0-9]{6}$"), "unfurl_links": B}, ["channel", "text"])),
    ("google:calendar-event", "a calendar event", obj({
        "summary": S(maxLength=30), "location": S(maxLength=30),
        "start": obj({"dateTime": S(format="date-time"), "timeZone": S(maxLength=20)}, ["dateTime"]),
        "end": obj({"dateTime": S(format="date-time"), "timeZone": S(maxLength=20)}, ["dateTime"]),
        "attendees": {"type": "array", "maxItems": 3, "items": obj({"email": S(format="email"),
                                                                     "optional": B}, ["email"])}},
        ["summary", "start", "end"])),
    ("google:places-text-search", "a place search request", obj({
        "textQuery": S(maxLength=40), "maxResultCount": I(minimum=1, maximum=20),
        "openNow": B, "minRating": N(minimum=0, maximum=5),
        "priceLevels": {"type": "array", "maxItems": 2, "items": {"enum": [
            "PRICE_LEVEL_INEXPENSIVE", "PRICE_LEVEL_MODERATE", "PRICE_LEVEL_EXPENSIVE"]}}}, ["textQuery"])),
    ("openapi:petstore-pet", "a pet in the pet store", obj({
        "id": I(), "name": S(maxLength=20),
        "category": obj({"id": I(), "name": S(maxLength=20)}, []),
        "photoUrls": {"type": "array", "items": S(maxLength=40), "maxItems": 2},
        "tags": {"type": "array", "maxItems": 2, "items": obj({"id": I(), "name": S(maxLength=12)}, [])},
        "status": {"enum": ["available", "pending", "sold"]}}, ["name", "photoUrls"])),
    ("openapi:petstore-order", "a pet store order", obj({
        "id": I(), "petId": I(), "quantity": I(minimum=1, maximum=10), "shipDate": S(format="date-time"),
        "status": {"enum": ["placed", "approved", "delivered"]}, "complete": B})),
    ("k8s:configmap", "a Kubernetes ConfigMap", obj({
        "apiVersion": {"const": "v1"}, "kind": {"const": "ConfigMap"},
        "metadata": obj({"name": S(pattern="^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$"),
                         "namespace": S(maxLength=20),
                         "labels": {"type": "object", "additionalProperties": S(maxLength=20)}}, ["name"]),
        "data": {"type": "object", "additionalProperties": S(maxLength=30)}}, ["apiVersion", "kind", "metadata"])),
    ("k8s:container", "a container spec", obj({
        "name": S(maxLength=20), "image": S(maxLength=30),
        "ports": {"type": "array", "maxItems": 2, "items": obj({"containerPort": I(minimum=1, maximum=65535),
                                                                 "protocol": {"enum": ["TCP", "UDP"]}},
                                                                ["containerPort"])},
        "resources": obj({"limits": obj({"cpu": S(maxLength=6), "memory": S(maxLength=6)}, [])}, [])},
        ["name", "image"])),
    ("geojson:point", "a GeoJSON point", obj({
        "type": {"const": "Point"},
        "coordinates": {"type": "array", "prefixItems": [N(minimum=-180, maximum=180), N(minimum=-90, maximum=90)],
                        "items": False, "minItems": 2}})),
    ("geojson:feature", "a GeoJSON feature", obj({
        "type": {"const": "Feature"},
        "geometry": obj({"type": {"const": "Point"}, "coordinates": {"type": "array", "items": N(), "minItems": 2,
                                                                      "maxItems": 2}}),
        "properties": {"type": "object", "additionalProperties": {"type": ["string", "number"], "maxLength": 20}}})),
    ("schema.org:Person", "a person", obj({
        "@type": {"const": "Person"}, "name": S(maxLength=25), "jobTitle": S(maxLength=25),
        "birthDate": S(format="date"), "email": S(format="email"),
        "address": obj({"@type": {"const": "PostalAddress"}, "addressLocality": S(maxLength=20),
                        "addressCountry": S(maxLength=20)}, ["@type"])}, ["@type", "name"])),
    ("schema.org:Recipe", "a recipe", obj({
        "name": S(maxLength=30), "recipeYield": I(minimum=1, maximum=12), "cookTime": S(pattern="^PT[0-9]{1,2}M$"),
        "recipeIngredient": {"type": "array", "items": S(maxLength=25), "minItems": 1, "maxItems": 4}})),
    ("twilio:send-sms", "an SMS to send", obj({
        "To": S(pattern="^\\+[1-9][0-9]{7,12}$"), "From": S(pattern="^\\+[1-9][0-9]{7,12}$"),
        "Body": S(maxLength=60)})),
    ("sendgrid:mail-send", "an email to send", obj({
        "personalizations": {"type": "array", "minItems": 1, "maxItems": 1, "items": obj({
            "to": {"type": "array", "minItems": 1, "maxItems": 2, "items": obj({"email": S(format="email"),
                                                                                "name": S(maxLength=20)}, ["email"])}})},
        "from": obj({"email": S(format="email")}), "subject": S(maxLength=40),
        "content": {"type": "array", "minItems": 1, "maxItems": 1, "items": obj({
            "type": {"enum": ["text/plain", "text/html"]}, "value": S(maxLength=60)})}})),
    ("jira:create-issue", "a Jira ticket", obj({"fields": obj({
        "project": obj({"key": S(pattern="^[A-Z]{2,5}$")}), "summary": S(maxLength=40),
        "issuetype": obj({"name": {"enum": ["Bug", "Task", "Story"]}}),
        "priority": obj({"name": {"enum": ["High", "Medium", "Low"]}}),
        "labels": {"type": "array", "items": S(maxLength=10), "maxItems": 3}}, ["project", "summary", "issuetype"])})),
    ("shopify:product", "a product listing", obj({
        "title": S(maxLength=30), "vendor": S(maxLength=20), "product_type": S(maxLength=20),
        "status": {"enum": ["active", "draft", "archived"]},
        "variants": {"type": "array", "minItems": 1, "maxItems": 2, "items": obj({
            "price": S(pattern="^[0-9]{1,4}\\.[0-9]{2}$"), "sku": S(maxLength=12),
            "inventory_quantity": I(minimum=0, maximum=1000)}, ["price"])}}, ["title"])),
    ("spotify:search", "a music search request", obj({
        "q": S(maxLength=30), "type": {"type": "array", "minItems": 1, "maxItems": 2,
                                       "items": {"enum": ["album", "artist", "track", "playlist"]}},
        "limit": I(minimum=1, maximum=50), "offset": I(minimum=0, maximum=1000)}, ["q", "type"])),
    ("aws:s3-put-object", "an S3 upload request", obj({
        "Bucket": S(pattern="^[a-z0-9][a-z0-9.-]{2,20}$"), "Key": S(maxLength=30),
        "ContentType": S(maxLength=25), "ACL": {"enum": ["private", "public-read", "authenticated-read"]},
        "StorageClass": {"enum": ["STANDARD", "GLACIER", "STANDARD_IA"]},
        "Metadata": {"type": "object", "additionalProperties": S(maxLength=20)}}, ["Bucket", "Key"])),
    ("docker-compose:service", "a docker compose service", obj({
        "image": S(maxLength=30), "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
        "ports": {"type": "array", "items": S(pattern="^[0-9]{2,5}:[0-9]{2,5}$"), "maxItems": 2},
        "environment": {"type": "object", "additionalProperties": S(maxLength=20)},
        "depends_on": {"type": "array", "items": S(maxLength=15), "maxItems": 2}}, ["image"])),
    ("github-actions:step", "a GitHub Actions workflow step", obj({
        "name": S(maxLength=30), "uses": S(pattern="^[a-z-]+/[a-z-]+@v[0-9]$"),
        "with": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"], "maxLength": 20}},
        "if": S(maxLength=30)}, ["name"])),
    ("npm:package.json", "a package.json", obj({
        "name": S(pattern="^[a-z][a-z0-9-]{1,20}$"), "version": S(pattern="^[0-9]+\\.[0-9]+\\.[0-9]+$"),
        "private": B, "scripts": {"type": "object", "additionalProperties": S(maxLength=25)},
        "dependencies": {"type": "object", "additionalProperties": S(pattern="^\\^[0-9]+\\.[0-9]+\\.[0-9]+$")}},
        ["name", "version"])),
    ("zoom:create-meeting", "a Zoom meeting", obj({
        "topic": S(maxLength=30), "type": {"enum": [1, 2, 3, 8]}, "start_time": S(format="date-time"),
        "duration": I(minimum=1, maximum=600), "timezone": S(maxLength=20),
        "settings": obj({"host_video": B, "participant_video": B, "join_before_host": B,
                         "waiting_room": B}, [])}, ["topic", "type"])),
    ("notion:create-page", "a Notion page", obj({
        "parent": obj({"database_id": S(format="uuid")}),
        "properties": obj({"Name": obj({"title": {"type": "array", "maxItems": 1, "items": obj({
            "text": obj({"content": S(maxLength=30)})})}}),
            "Status": obj({"select": obj({"name": {"enum": ["Todo", "Doing", "Done"]}})})})})),
    ("discord:embed", "a Discord embed", obj({
        "title": S(maxLength=30), "description": S(maxLength=60), "color": I(minimum=0, maximum=16777215),
        "fields": {"type": "array", "maxItems": 3, "items": obj({"name": S(maxLength=15), "value": S(maxLength=20),
                                                                 "inline": B}, ["name", "value"])}}, ["title"])),
    ("telegram:sendMessage", "a Telegram bot message", obj({
        "chat_id": I(), "text": S(maxLength=60), "parse_mode": {"enum": ["MarkdownV2", "HTML"]},
        "disable_notification": B, "reply_to_message_id": I(minimum=1)}, ["chat_id", "text"])),
    ("mapbox:geocode-result", "a geocoding result", obj({
        "place_name": S(maxLength=40), "center": {"type": "array", "items": N(), "minItems": 2, "maxItems": 2},
        "relevance": N(minimum=0, maximum=1), "place_type": {"type": "array", "maxItems": 2,
                                                              "items": {"enum": ["country", "region", "place",
                                                                                 "address"]}}})),
    ("x:create-post", "a post for X (Twitter)", obj({
        "text": S(maxLength=100), "reply_settings": {"enum": ["following", "mentionedUsers"]},
        "poll": obj({"options": {"type": "array", "items": S(maxLength=15), "minItems": 2, "maxItems": 4},
                     "duration_minutes": I(minimum=5, maximum=10080)})}, ["text"])),
    ("youtube:search-list", "a video search request", obj({
        "part": {"const": "snippet"}, "q": S(maxLength=30), "maxResults": I(minimum=0, maximum=50),
        "order": {"enum": ["date", "rating", "relevance", "title", "viewCount"]},
        "type": {"enum": ["video", "channel", "playlist"]}, "safeSearch": {"enum": ["moderate", "none", "strict"]}},
        ["part"])),
    ("anthropic:tool-use-input", "a stock price lookup", obj({
        "ticker": S(pattern="^[A-Z]{1,5}$", description="The stock ticker symbol, e.g. AAPL")})),
    ("langchain:search-tool", "a web search query", obj({
        "query": S(maxLength=40), "num_results": I(minimum=1, maximum=10),
        "time_range": {"anyOf": [{"enum": ["day", "week", "month"]}, {"type": "null"}]}}, ["query"])),
    ("mcp:read-file", "a read_file tool call", obj({
        "path": S(maxLength=40), "head": I(minimum=1), "tail": I(minimum=1)}, ["path"])),
    ("pydantic:invoice", "an invoice", {
        "$defs": {"Item": {"properties": {"name": {"title": "Name", "type": "string", "maxLength": 20},
                                          "price": {"title": "Price", "type": "number"},
                                          "qty": {"title": "Qty", "type": "integer", "default": 1}},
                           "required": ["name", "price"], "title": "Item", "type": "object"}},
        "properties": {"number": {"title": "Number", "type": "string", "maxLength": 12},
                       "items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array", "maxItems": 3},
                       "paid": {"default": False, "title": "Paid", "type": "boolean"}},
        "required": ["number", "items"], "title": "Invoice", "type": "object"}),
    ("openapi:error", "an API error response", obj({
        "code": I(minimum=400, maximum=599), "message": S(maxLength=40),
        "details": {"type": "array", "maxItems": 2, "items": obj({"field": S(maxLength=15),
                                                                   "issue": S(maxLength=25)})}}, ["code", "message"])),
]

REGEXES = [
    ("date", "today's date", r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("time", "the current time", r"([01][0-9]|2[0-3]):[0-5][0-9]"),
    ("phone-us", "a US phone number", r"\(\d{3}\) \d{3}-\d{4}"),
    ("email", "an email address", r"[a-z0-9._]{1,20}@[a-z0-9]{1,15}\.(com|org|net)"),
    ("ipv4", "an IP address", r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"),
    ("hex-color", "a color in hex", r"#[0-9a-fA-F]{6}"),
    ("yes-no", "an answer", r"(yes|no)"),
    ("int", "a number", r"-?[1-9][0-9]{0,5}"),
    ("float", "a price", r"[0-9]{1,4}\.[0-9]{2}"),
    ("word", "a single word", r"[A-Za-z]{1,15}"),
    ("name", "a full name", r"[A-Z][a-z]{1,10} [A-Z][a-z]{1,12}"),
    ("uuid", "a UUID", r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"),
    ("zip", "a ZIP code", r"\d{5}(-\d{4})?"),
    ("semver", "a version number", r"v?(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})"),
    ("sentence", "a short sentence", r"[A-Z][a-z ,]{5,40}\."),
    ("list", "three fruits", r"(apple|banana|cherry|kiwi|mango)(, (apple|banana|cherry|kiwi|mango)){2}"),
    ("url", "a web address", r"https://[a-z]{2,12}\.(com|org|io)(/[a-z]{1,8}){0,2}"),
    ("unicode", "a greeting", r"(héllo|こんにちは|привет) [^\s]{1,6}!"),
    ("csv-row", "a CSV row", r"[a-z]{1,8},\d{1,3},(true|false)"),
    ("mac", "a MAC address", r"([0-9A-F]{2}:){5}[0-9A-F]{2}"),
    ("lazy-group", "a tag", r"<(?:b|i|em)>\w{1,10}?</(?:b|i|em)>"),
]

GBNF = [
    ("arith", "an arithmetic expression", r'''
root ::= expr
expr ::= term ([-+] term){0,3}
term ::= num ([*/] num){0,2}
num ::= [1-9] [0-9]{0,2} | "(" expr ")"
'''),
    ("yaml-ish", "a shopping list", r'''
root ::= "items:\n" item{1,4}
item ::= "  - " [a-z]{2,12} "\n"
'''),
    ("sql", "a SQL query", r'''
root ::= "SELECT " cols " FROM " ident (" WHERE " ident " = " value)? ";"
cols ::= "*" | ident (", " ident){0,3}
ident ::= [a-z_] [a-z0-9_]{0,10}
value ::= [0-9]{1,5} | "'" [a-zA-Z ]{0,12} "'"
'''),
    ("chess", "a chess opening in algebraic notation", r'''
root ::= move (" " move){1,5}
move ::= [1-9] ". " half " " half
half ::= piece? [a-h] [1-8] | "O-O"
piece ::= [KQRBN]
'''),
    ("json-list", "a JSON list of small integers", r'''
root ::= "[" (num ("," " "? num){0,5})? "]"
num ::= "0" | [1-9] [0-9]?
'''),
]
