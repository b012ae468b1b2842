/* JSON Schema -> GBNF, the conversion's shared state and helpers (schema.c; the keyword
 * modules schema_*.c). Rank 0, any thread: one struct sc per conversion. */
#ifndef TPD_GRAMMAR_SCHEMA_INTERNAL_H
#define TPD_GRAMMAR_SCHEMA_INTERNAL_H

#include <cjson/cJSON.h>

#include "../util/sbuf.h"

#define RN 128        /* rule name buffer */
#define KEY_ANY 128   /* key_rules: any key characters; an ASCII character: others than it */
#define KEY_OTHER 129 /* key_rules: any character, then any key characters */

struct sref {
    char *ref;
    int id;
    const cJSON *target;
    int done; /* its rule already written (sc_try_gen) */
};

struct sc {
    const cJSON *root;
    char name[64];
    char j[80]; /* the generic JSON rules' prefix */
    struct sbuf *out;
    char *err;
    int n_rules;
    struct sref *refs;
    int n_refs, cap_refs;
    char **busy; /* the texts of the merging schemas being written (sc_gen) */
    int n_busy, cap_busy;
    int depth;
    cJSON *owned;                              /* merged schemas, freed at the end */
    unsigned char key_rules[2][KEY_OTHER + 1]; /* shared key rules written (schema_object) */
    int closed; /* objects with properties and no additionalProperties closed (sc_lower_object) */
    int every_type;   /* a schema without type takes every type (else the one its keywords imply) */
    int ref_alone;    /* drafts 3-7 (the root's $schema): keywords beside $ref are ignored */
    int int_frac;     /* drafts 6 on, or no $schema: an integer may have a zero fraction (2.0) */
    int not_branches; /* written by not_union, each lowered again: at most NOT_BRANCHES_MAX */
};

/* ---- oneOf: exclusive branches ----
 * A value of oneOf must match exactly one branch. The grammar produces branch i's values
 * (gen, a subset of what i accepts) and none may be accepted by another branch j (acc: what
 * j accepts, over-approximated where unsure). That is decided from types, const/enum values,
 * numeric, length and item-count ranges, and for objects a property one branch always writes
 * and the other forbids or constrains disjointly (a discriminator). Where a branch i may
 * write a property that j requires, i is narrowed to never write it ("sharpened"), which
 * keeps its values valid for i and rejected by j. Anything else is refused. */

/* JSON types as bits (T_INT: integral numbers, T_FRAC: others) */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64 };

#define T_ANY 127

#define NOT_STRINGS "$tpd-not-strings" /* lower_not's strings left out (an array) */
#define NOT_BRANCHES_MAX 4096          /* lower_not's union branches in one conversion */
/* patternProperties whose keys gen_object writes as extra keys (lower_object) */
#define PATTERN_EXTRA "$tpd-pattern-extra"
/* dependencies on names of declared optional properties: {name: [names]} (lower_object;
 * gen_object writes name only beside its names) */
#define DEPENDS "$tpd-dependencies"
/* beside PATTERN_EXTRA: the additionalProperties (true or a schema) of keys that match no
 * pattern, which gen_object writes where it can tell them (lower_object) */
#define PATTERN_ADDL "$tpd-pattern-addl"
/* an allOf side without patternProperties closed to their keys (merge; lower_object) */
#define NO_PATTERN_EXTRA "$tpd-no-pattern-extra"
/* on the anyOf [without name, with name] of an optional property's dependency schema
 * (lower_object's split_on): a "with" branch tpd cannot write is left out, as the property
 * was before */
#define SPLIT_DEP "$tpd-split-dep"
/* on lower_if's anyOf [if and then, not if and else]: a branch tpd cannot write is left out
 * (the values of the other only), so that one it cannot write deep inside leaves out no
 * more than its own branch */
#define EITHER_BRANCH "$tpd-either-branch"

/* what may follow an integer's digits where c->int_frac: a zero fraction ("2.0") */
#define INT_FRAC "(\".\" \"0\"{1,15})?"

int sc_in_list(const char *const *l, const char *s);
int sc_is_validity(const cJSON *s, const char *k);
int sc_serr(struct sc *c, const char *fmt, const char *a);
void sc_new_rule(struct sc *c, char *nm);
void sc_emit(struct sc *c, const char *nm, const char *body);
void sc_put_json_literal(struct sbuf *b, const cJSON *v);
const cJSON *sc_resolve_pointer(struct sc *c, const char *ref);
int sc_only_ref(const struct sc *c, const cJSON *s);
int sc_gen(struct sc *c, const cJSON *s, char *nm);
int sc_try_gen(struct sc *c, const cJSON *s, char *nm, int deep, char *why);

#endif
