/* String formats (schema_fmt.h): each a GBNF item that only produces valid instances of
 * the format (a subset of it: RFC 3339 dates with every valid day, leap years included;
 * RFC 5321's common address form; RFC 1123 host names whose last label starts with a
 * letter; RFC 3986 URIs and references without user information; ISO 8601 durations as RFC 3339's
 * appendix A writes them), bounded in length so that a maxLength at or above the bound keeps the
 * format. */
#include "schema_fmt.h"

#include <string.h>

#define YEAR "(\"0\" (\"0\" (\"0\" [1-9] | [1-9] [0-9]) | [1-9] [0-9]{2}) | [1-9] [0-9]{3})"
#define LEAP4 "(\"0\" [48] | [2468] [048] | [13579] [26])"
#define LEAP_YEAR "([0-9]{2} " LEAP4 " | " LEAP4 " \"00\")"
#define DATE \
    "(" YEAR \
    " \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | " \
    "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | " \
    "\"1\" [0-9] | " \
    "\"2\" [0-8])) | " LEAP_YEAR " \"-02-29\")"
#define TIME \
    "(([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? " \
    "(\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9]))"
#define LABEL "([a-zA-Z0-9] ([a-zA-Z0-9\\-]{0,61} [a-zA-Z0-9])?)"
#define TLD "([a-zA-Z] ([a-zA-Z0-9\\-]{0,61} [a-zA-Z0-9])?)"
/* up to 3 labels of up to 63 characters, or 4 to 10 of up to 20: 253 characters at most */
#define LABEL20 "([a-zA-Z0-9] ([a-zA-Z0-9\\-]{0,18} [a-zA-Z0-9])?)"
#define TLD20 "([a-zA-Z] ([a-zA-Z0-9\\-]{0,18} [a-zA-Z0-9])?)"
#define HOST "((" LABEL " \".\"){0,2} " TLD " | (" LABEL20 " \".\"){3,9} " TLD20 ")"
#define ATEXT "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]"
#define OCTET "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])"
#define IPV4 "(" OCTET " \".\" " OCTET " \".\" " OCTET " \".\" " OCTET ")"
#define H16 "[0-9a-fA-F]{1,4}"
#define H16S(n) "(" H16 " (\":\" " H16 "){0," #n "})?"
/* IPv6: eight groups, or "::" with a groups before it and at most 7 - a after */
#define H16_AFTER(a) " \"::\" " H16S(a)
#define H16_BEFORE(n) H16 " (\":\" " H16 "){" #n "}"
#define IPV6 \
    "(" H16_BEFORE(7) " | \"::\" " H16S(6) " | " H16 H16_AFTER(5) " | " H16_BEFORE(1) \
        H16_AFTER(4) " | " H16_BEFORE(2) H16_AFTER(3) " | " H16_BEFORE(3) \
            H16_AFTER(2) " | " H16_BEFORE(4) H16_AFTER(1) " | " H16_BEFORE(5) \
                H16_AFTER(0) " | " H16_BEFORE(6) " \"::\")"
#define PCHAR "([a-zA-Z0-9._~!$&'()*+,;=:@\\-] | \"%\" [0-9a-fA-F] [0-9a-fA-F])"
#define QCHAR "(" PCHAR " | [/?])"
#define URI_TAIL "(\"?\" " QCHAR "{0,256})? (\"#\" " QCHAR "{0,128})?"
#define SEGS "(\"/\" " PCHAR "{0,64}){0,15}"
/* RFC 3986's hier-part: "//" authority (a host name, IPv4, [IPv6] or empty; a port)
 * path-abempty, path-absolute, path-rootless or path-empty (no user information) */
#define AUTH_PATH \
    "\"//\" (" HOST " | " IPV4 " | \"[\" " IPV6 " \"]\")? (\":\" [0-9]{1,5})? (\"/\" " PCHAR \
    "{0,64}){0,16}"
#define URI \
    "([a-zA-Z] [a-zA-Z0-9+.\\-]{0,31} \":\" (" AUTH_PATH " | \"/\" (" PCHAR "{1,64} " SEGS \
    ")? | " PCHAR "{1,64} " SEGS ")? " URI_TAIL ")"
/* a relative reference: as hier-part, the first segment of a relative path without ':' */
#define NCCHAR "([a-zA-Z0-9._~!$&'()*+,;=@\\-] | \"%\" [0-9a-fA-F] [0-9a-fA-F])"
#define URI_REF \
    "(" URI " | (" AUTH_PATH " | \"/\" (" PCHAR "{1,64} " SEGS ")? | " NCCHAR "{1,64} " SEGS \
    ")? " URI_TAIL ")"
/* the longest: scheme 32, ":" and "//", a host of 209, a port of 6, 16 segments of 64
 * percent-encoded octets, a query of 256 and a fragment of 128 of them */
#define URI_MAX (32 + 3 + 209 + 6 + 16 * (1 + 64 * 3) + 1 + 256 * 3 + 1 + 128 * 3)
/* RFC 6570 URI templates: literals (unreserved, reserved but ' and percent-encoded) and
 * expressions of an operator of levels 2-3 and up to 4 variables (names of letters, digits
 * and _ joined by dots, a prefix length of 1-999 or an explode): the RFC's and the checker's
 * (python uri_template: no prefix above 999) common ground */
#define TVAR "[a-zA-Z0-9_]{1,24} (\".\" [a-zA-Z0-9_]{1,24}){0,2} (\":\" [1-9] [0-9]{0,2} | \"*\")?"
#define TEMPLATE \
    "([a-zA-Z0-9!#$&()*+,./:;=?@_~\\[\\]\\-] | \"%\" [0-9a-fA-F] [0-9a-fA-F] | \"{\" " \
    "[+#./;?&]? " TVAR " (\",\" " TVAR "){0,3} \"}\"){0,64}"
/* a variable: 3 x 24 + 2 dots + 4; an expression: braces, operator, 4 variables, 3 commas */
#define TEMPLATE_MAX (64 * (3 + 4 * (3 * 24 + 2 + 4) + 3))
#define DUR_N "[0-9]{1,9}"
#define DUR_TIME \
    "(\"T\" (" DUR_N " \"H\" (" DUR_N " \"M\" (" DUR_N " \"S\")?)? | " DUR_N " \"M\" (" DUR_N \
    " \"S\")? | " DUR_N " \"S\"))"
/* Regular expressions that both ECMA-262 (with and without the u flag) and Python's re read:
 * literals (no character that needs a JSON escape, none that a u-flag pattern must escape),
 * ".", classes of up to 4 letters, digits, a few signs or the ranges a-z, A-Z, 0-9 (none that
 * Python reads as a set operation), each with a quantifier (greedy or lazy; counts n <= 9 < m),
 * up to 12 of them or groups of up to 2 alternatives of 3, between optional anchors; up to 3
 * such alternatives */
#define RX_QUANT "([*+?] | \"{\" [1-9] \"}\" | \"{\" [0-9] \",\" ([1-9] [0-9])? \"}\") \"?\"?"
#define RX_CLASS \
    "\"[\" \"^\"? (\"a-z\" | \"A-Z\" | \"0-9\" | [a-zA-Z0-9_ .,:;@#%=<>'!`/]){1,4} \"]\""
#define RX_ITEM "(([a-zA-Z0-9 _,:;@#%&=<>'!~`/\\-] | \".\" | " RX_CLASS ") (" RX_QUANT ")?)"
#define RX_GROUP "(\"(\" " RX_ITEM "{1,3} (\"|\" " RX_ITEM "{1,3})? \")\" (" RX_QUANT ")?)"
#define RX_BRANCH "(\"^\"? (" RX_ITEM " | " RX_GROUP "){0,12} \"$\"?)"
#define REGEX RX_BRANCH " (\"|\" " RX_BRANCH "){0,2}"
/* an item: a class of 15 and a quantifier of 7; a group: 2 x 3 items, 3 signs, a quantifier */
#define REGEX_MAX (3 * (1 + 12 * (1 + 6 * 22 + 2 + 7) + 1) + 2)
#define JSON_POINTER "(\"/\" ([^/~\"\\\\\\x7F\\x00-\\x1F] | \"~\" [01]){0,64}){0,16}"

static const struct fmt {
    const char *name, *gbnf;
    long min, max;
} fmts[] = {
    {"date", DATE, 10, 10},
    {"time", TIME, 9, 21},
    {"date-time", DATE " \"T\" " TIME, 20, 32},
    {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}",
     36, 36},
    {"email", ATEXT "{1,30} (\".\" " ATEXT "{1,16}){0,2} \"@\" " HOST, 3, 274},
    {"idn-email", ATEXT "{1,30} (\".\" " ATEXT "{1,16}){0,2} \"@\" " HOST, 3, 274},
    {"hostname", HOST, 1, 209},
    {"idn-hostname", "([a-z0-9]{1,63} \".\"){0,2} [a-z] [a-z0-9]{0,62}", 1, 191},
    {"ipv4", IPV4, 7, 15},
    {"ipv6", "(" IPV6 ")", 2, 39},
    {"uri", URI, 2, URI_MAX},
    {"iri", URI, 2, URI_MAX},
    {"uri-reference", URI_REF, 0, URI_MAX},
    {"iri-reference", URI_REF, 0, URI_MAX},
    {"byte", "([a-zA-Z0-9+/]{4}){0,256} ([a-zA-Z0-9+/]{2} \"==\" | [a-zA-Z0-9+/]{3} \"=\")?", 0,
     1028},
    {"duration",
     "\"P\" (((" DUR_N " \"D\" | " DUR_N " \"M\" (" DUR_N " \"D\")? | " DUR_N " \"Y\" (" DUR_N
     " \"M\" (" DUR_N " \"D\")?)?) " DUR_TIME "?) | " DUR_TIME " | " DUR_N " \"W\")",
     3, 64},
    {"json-pointer", JSON_POINTER, 0, 1040},
    {"uri-template", TEMPLATE, 0, TEMPLATE_MAX},
    {"relative-json-pointer", "(\"0\" | [1-9] [0-9]{0,8}) (\"#\" | " JSON_POINTER ")", 1, 1049},
    {"regex", REGEX, 0, REGEX_MAX},
};

const char *schema_format(const char *name, long *min_len, long *max_len) {
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++)
        if (strcmp(fmts[i].name, name) == 0) {
            *min_len = fmts[i].min;
            *max_len = fmts[i].max;
            return fmts[i].gbnf;
        }
    return NULL;
}
