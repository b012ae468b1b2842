/* INT4 checkpoints' quantization_config and part names (int4cfg.h). */
#include "int4cfg.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../util/err.h"

const char *const int4w_part_suffix[] = {"", "", ".qscale", ".qzero", ".gidx", ".qshape"};

/* ---- quantization_config ------------------------------------------------------------ */

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = item(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An integer item (first of keys that is present), or dflt when none is. */
static double json_num(const cJSON *o, const char *k1, const char *k2, double dflt) {
    const cJSON *v = item(o, k1);
    if (!v && k2) v = item(o, k2);
    return cJSON_IsNumber(v) ? v->valuedouble : v && !cJSON_IsNull(v) ? NAN : dflt;
}

static int set_group(struct int4w_config *q, double g, const char *path, char *err) {
    if (g == -1 || g == 0) {
        q->group = 0;
        return 0;
    }
    if (!(g >= I4_ELEMS && g <= I4_MAX_GROUP) || g != (int)g || (int)g % I4_ELEMS)
        return err_set(err,
                       "%s: quantization_config: %s group_size %g is not supported "
                       "(a multiple of %d, or -1 for one group per row)",
                       path, q->method, g, I4_ELEMS);
    q->group = (int)g;
    return 0;
}

static int bits4(const struct int4w_config *q, double bits, const char *path, char *err) {
    if (bits != 4)
        return err_set(err,
                       "%s: quantization_config: %s with %g-bit weights is not "
                       "supported (INT4: 4 bits)",
                       path, q->method, bits);
    return 0;
}

/* compressed-tensors pack-quantized: every config group 4-bit int weights of one
 * strategy, no activation quantization. */
static int parse_ct(struct int4w_config *q, const cJSON *qc, const char *path, char *err) {
    const cJSON *kv = item(qc, "kv_cache_scheme");
    if (kv && !cJSON_IsNull(kv))
        return err_set(err, "%s: quantization_config: kv_cache_scheme is not supported", path);
    const cJSON *groups = item(qc, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return err_set(err,
                       "%s: quantization_config: compressed-tensors without "
                       "config_groups",
                       path);
    int seen = 0;
    for (const cJSON *g = groups->child; g; g = g->next) {
        const cJSON *w = item(g, "weights");
        const char *type = json_str(w, "type"), *strat = json_str(w, "strategy");
        if (!cJSON_IsObject(w) || !type || strcmp(type, "int"))
            return err_set(err,
                           "%s: quantization_config: group '%s': weights of type '%s' "
                           "are not supported by pack-quantized (int)",
                           path, g->string, type ? type : "(none)");
        struct int4w_config one = *q;
        if (bits4(&one, json_num(w, "num_bits", NULL, 0), path, err)) return -1;
        one.sym = !cJSON_IsFalse(item(w, "symmetric"));
        if (cJSON_IsTrue(item(w, "dynamic")))
            return err_set(err,
                           "%s: quantization_config: group '%s': dynamic weight "
                           "quantization is not supported",
                           path, g->string);
        if (strat && !strcmp(strat, "group")) {
            if (set_group(&one, json_num(w, "group_size", NULL, NAN), path, err)) return -1;
            if (!one.group)
                return err_set(err,
                               "%s: quantization_config: group '%s': strategy group "
                               "without a group_size",
                               path, g->string);
        } else if (strat && !strcmp(strat, "channel")) {
            one.group = 0;
        } else {
            return err_set(err,
                           "%s: quantization_config: group '%s': weight strategy '%s' "
                           "is not supported (INT4: group, channel)",
                           path, g->string, strat ? strat : "(none)");
        }
        const cJSON *in = item(g, "input_activations"), *out = item(g, "output_activations");
        if ((in && !cJSON_IsNull(in)) || (out && !cJSON_IsNull(out)))
            return err_set(err,
                           "%s: quantization_config: group '%s': activation "
                           "quantization with 4-bit weights is not supported (W4A16 only)",
                           path, g->string);
        if (seen && (one.group != q->group || one.sym != q->sym))
            return err_set(err,
                           "%s: quantization_config: config groups with different "
                           "weight schemes are not supported",
                           path);
        *q = one;
        seen = 1;
    }
    return 0;
}

static int parse_gptq(struct int4w_config *q, const cJSON *qc, const char *path, char *err) {
    if (bits4(q, json_num(qc, "bits", NULL, NAN), path, err) ||
        set_group(q, json_num(qc, "group_size", NULL, -1), path, err))
        return -1;
    const char *fmt = json_str(qc, "checkpoint_format");
    if (fmt && strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        return err_set(err,
                       "%s: quantization_config: gptq checkpoint_format '%s' is not "
                       "supported (gptq, gptq_v2)",
                       path, fmt);
    q->zero_offset = !fmt || !strcmp(fmt, "gptq"); /* v1 stores zero - 1 */
    return 0;
}

static int parse_awq(struct int4w_config *q, const cJSON *qc, const char *path, char *err) {
    if (bits4(q, json_num(qc, "bits", "w_bit", NAN), path, err) ||
        set_group(q, json_num(qc, "group_size", "q_group_size", NAN), path, err))
        return -1;
    const char *ver = json_str(qc, "version");
    if (ver && strcmp(ver, "gemm") && strcmp(ver, "GEMM"))
        return err_set(err,
                       "%s: quantization_config: awq version '%s' is not supported "
                       "(gemm)",
                       path, ver);
    if (cJSON_IsFalse(item(qc, "zero_point")))
        return err_set(err,
                       "%s: quantization_config: awq without zero points is not "
                       "supported",
                       path);
    return 0;
}

int int4w_config_parse(struct int4w_config *q, const char *json, size_t len, const char *path,
                       char *err) {
    memset(q, 0, sizeof *q);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return err_set(err, "%s: not valid JSON", path);
    int rc = 0;
    const cJSON *qc = item(root, "quantization_config");
    const char *m = cJSON_IsObject(qc) ? json_str(qc, "quant_method") : NULL;
    const char *fmt = m ? json_str(qc, "format") : NULL;
    if (!m) goto out;
    snprintf(q->method, sizeof q->method, "%s", m);
    if (!strcmp(m, "gptq")) {
        q->format = INT4W_GPTQ;
        rc = parse_gptq(q, qc, path, err);
    } else if (!strcmp(m, "awq")) {
        q->format = INT4W_AWQ;
        rc = parse_awq(q, qc, path, err);
    } else if (!strcmp(m, "compressed-tensors") && fmt && !strcmp(fmt, "pack-quantized")) {
        q->format = INT4W_CT;
        rc = parse_ct(q, qc, path, err);
    }
out:
    cJSON_Delete(root);
    if (rc) memset(q, 0, sizeof *q);
    return rc;
}

/* ---- names and shapes --------------------------------------------------------------- */

enum int4w_part int4w_part_of(const struct int4w_config *q, const char *name, char *out, size_t n) {
    static const struct {
        enum int4w_format f;
        const char *suffix;
        enum int4w_part part;
    } parts[] = {
        {INT4W_CT, "weight_packed", INT4W_PACKED},   {INT4W_CT, "weight_scale", INT4W_SCALE},
        {INT4W_CT, "weight_zero_point", INT4W_ZERO}, {INT4W_CT, "weight_g_idx", INT4W_GIDX},
        {INT4W_CT, "weight_shape", INT4W_SHAPE},     {INT4W_GPTQ, "qweight", INT4W_PACKED},
        {INT4W_GPTQ, "scales", INT4W_SCALE},         {INT4W_GPTQ, "qzeros", INT4W_ZERO},
        {INT4W_GPTQ, "g_idx", INT4W_GIDX},           {INT4W_AWQ, "qweight", INT4W_PACKED},
        {INT4W_AWQ, "scales", INT4W_SCALE},          {INT4W_AWQ, "qzeros", INT4W_ZERO},
    };
    size_t ln = strlen(name);
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        size_t ls = strlen(parts[i].suffix);
        if (parts[i].f != q->format || ln <= ls + 1 || name[ln - ls - 1] != '.' ||
            strcmp(name + ln - ls, parts[i].suffix))
            continue;
        if (snprintf(out, n, "%.*s.weight", (int)(ln - ls - 1), name) >= (int)n) return INT4W_NOT;
        return parts[i].part;
    }
    return INT4W_NOT;
}

int int4w_logical_shape(const struct int4w_config *q, const int64_t *shape, int n_dims,
                        int64_t ne[2]) {
    if (n_dims != 2 || shape[0] > (1 << 24) || shape[1] > (1 << 24)) return -1;
    switch (q->format) {
    case INT4W_CT: ne[0] = 8 * shape[1], ne[1] = shape[0]; return 0;
    case INT4W_GPTQ: ne[0] = 8 * shape[0], ne[1] = shape[1]; return 0;
    case INT4W_AWQ: ne[0] = shape[0], ne[1] = 8 * shape[1]; return 0;
    case INT4W_NONE: break;
    }
    return -1;
}
