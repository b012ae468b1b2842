/* Hugging Face config.json -> model_hparams. */
#include "hfconfig.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/err.h"

static const char *json_type(const cJSON *j) {
    if (cJSON_IsString(j)) return "string";
    if (cJSON_IsNumber(j)) return "number";
    if (cJSON_IsBool(j)) return "bool";
    if (cJSON_IsArray(j)) return "array";
    if (cJSON_IsObject(j)) return "object";
    if (cJSON_IsNull(j)) return "null";
    return "invalid";
}

/* JSON null counts as absent: HF writes "head_dim": null, "rope_scaling": null. */
static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static int json_to_int(const cJSON *j, int *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!isfinite(d) || floor(d) != d || d < INT_MIN || d > INT_MAX) return -1;
    *out = (int)d;
    return 0;
}

/* An integer field. Absent: *out = def when !required. */
static int get_int(const cJSON *o, const char *key, int required, int def, int *out,
                   const char *name, char *err) {
    const cJSON *j = field(o, key);
    if (!j) {
        if (required) return err_set(err, "%s: missing \"%s\"", name, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j))
        return err_set(err, "%s: \"%s\" must be an integer (found %s)", name, key, json_type(j));
    if (json_to_int(j, out))
        return err_set(err, "%s: \"%s\" = %g is not an integer that fits in 32 bits", name, key,
                       j->valuedouble);
    return 0;
}

static int get_float(const cJSON *o, const char *key, int required, float def, float *out,
                     const char *name, char *err) {
    const cJSON *j = field(o, key);
    if (!j) {
        if (required) return err_set(err, "%s: missing \"%s\"", name, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j))
        return err_set(err, "%s: \"%s\" must be a number (found %s)", name, key, json_type(j));
    *out = (float)j->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int def, int *out, const char *name,
                    char *err) {
    const cJSON *j = field(o, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j))
        return err_set(err, "%s: \"%s\" must be true or false (found %s)", name, key, json_type(j));
    *out = cJSON_IsTrue(j);
    return 0;
}

/* A token id: integer, or a list whose first element is taken (eos in Llama 3.1 configs
 * lists several end tokens), or absent/null -> -1. */
static int get_token_id(const cJSON *o, const char *key, int *out, const char *name, char *err) {
    const cJSON *j = field(o, key);
    *out = -1;
    if (!j) return 0;
    if (cJSON_IsArray(j)) {
        if (!j->child) return 0;
        j = j->child;
    }
    if (json_to_int(j, out) || *out < 0)
        return err_set(err, "%s: \"%s\" must be a non-negative integer or a list of them", name,
                       key);
    return 0;
}

static const struct {
    const char *hf, *model_type;
    enum model_arch arch;
} archs[] = {
    {"LlamaForCausalLM", "llama", ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", ARCH_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", ARCH_QWEN3},
    {"MixtralForCausalLM", "mixtral", ARCH_LLAMA},
    {"Qwen2MoeForCausalLM", "qwen2_moe", ARCH_QWEN2},
    {"Qwen3MoeForCausalLM", "qwen3_moe", ARCH_QWEN3},
};

static int get_arch(const cJSON *root, enum model_arch *arch, const char *name, char *err) {
    const cJSON *a = field(root, "architectures");
    const char *s = NULL;
    int by_hf = 1;
    if (a) {
        if (!cJSON_IsArray(a) || !cJSON_IsString(a->child))
            return err_set(err, "%s: \"architectures\" must be a list of strings", name);
        s = a->child->valuestring;
    } else {
        const cJSON *mt = field(root, "model_type");
        if (!cJSON_IsString(mt))
            return err_set(err, "%s: missing \"architectures\" (and no \"model_type\")", name);
        s = mt->valuestring;
        by_hf = 0;
    }
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(s, by_hf ? archs[i].hf : archs[i].model_type)) {
            *arch = archs[i].arch;
            return 0;
        }
    return err_set(err,
                   "%s: unsupported architecture '%.64s' (supported: LlamaForCausalLM, "
                   "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                   "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)",
                   name, s);
}

/* The rotary settings, in either layout: the long-standing top-level "rope_theta" and
 * "rope_scaling" {rope_type|type, factor, ...}, or transformers 5's "rope_parameters"
 * {rope_type, rope_theta, factor, ...}, which it writes instead of both. A file with both
 * must agree on the base; the scaling is read from "rope_scaling" when present. */
static int get_rope(const cJSON *root, struct model_hparams *hp, const char *name, char *err) {
    const cJSON *rp = field(root, "rope_parameters");
    if (rp && !cJSON_IsObject(rp))
        return err_set(err, "%s: \"rope_parameters\" must be an object (found %s)", name,
                       json_type(rp));
    if (rp && !field(rp, "rope_theta") && !field(rp, "rope_type"))
        return err_set(
            err,
            "%s: \"rope_parameters\" has no \"rope_theta\" or \"rope_type\" (per-layer-type "
            "rotary settings are not supported)",
            name);
    float top = 0, inner = 0;
    const int has_top = field(root, "rope_theta") != NULL,
              has_inner = rp && field(rp, "rope_theta");
    if (get_float(root, "rope_theta", 0, 10000.0f, &top, name, err) ||
        (rp && get_float(rp, "rope_theta", 0, 10000.0f, &inner, name, err)))
        return -1;
    if (has_top && has_inner && top != inner)
        return err_set(
            err, "%s: \"rope_theta\" = %g and \"rope_parameters\".\"rope_theta\" = %g disagree",
            name, (double)top, (double)inner);
    hp->rope_theta = has_inner ? inner : top;

    const char *key = "rope_scaling";
    const cJSON *rs = field(root, key);
    if (!rs && rp) {
        rs = rp;
        key = "rope_parameters";
    }
    if (!rs) return 0;
    if (!cJSON_IsObject(rs))
        return err_set(err, "%s: \"%s\" must be an object (found %s)", name, key, json_type(rs));
    const cJSON *t = field(rs, "rope_type");
    if (!t) t = field(rs, "type");
    if (!t && rs == rp) return 0; /* rope_parameters with the base only: no scaling */
    if (!cJSON_IsString(t))
        return err_set(err, "%s: \"%s\" has no string \"rope_type\"", name, key);
    if (!strcmp(t->valuestring, "default")) return 0;
    if (strcmp(t->valuestring, "llama3"))
        return err_set(err, "%s: %s type '%.32s' is not supported (only llama3)", name, key,
                       t->valuestring);
    hp->rope_scaling_llama3 = 1;
    if (get_float(rs, "factor", 1, 0, &hp->rope_factor, name, err) ||
        get_float(rs, "low_freq_factor", 0, 1.0f, &hp->rope_low_freq_factor, name, err) ||
        get_float(rs, "high_freq_factor", 0, 4.0f, &hp->rope_high_freq_factor, name, err) ||
        get_int(rs, "original_max_position_embeddings", 0, 8192, &hp->rope_orig_ctx, name, err))
        return -1;
    return 0;
}

/* Mixture-of-experts fields: Mixtral's (num_local_experts; the experts are intermediate_size
 * wide and always renormalized) or the Qwen MoE ones (num_experts, moe_intermediate_size,
 * shared_expert_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers). */
static int get_moe(const cJSON *root, struct model_hparams *hp, const char *name, char *err) {
    int mixtral = field(root, "num_local_experts") != NULL;
    if (get_int(root, mixtral ? "num_local_experts" : "num_experts", 0, 0, &hp->n_experts, name,
                err))
        return -1;
    if (!hp->n_experts) return 0;
    if (get_int(root, "num_experts_per_tok", 1, 0, &hp->n_experts_used, name, err) ||
        get_int(root, "moe_intermediate_size", !mixtral, hp->ffn_dim, &hp->expert_ffn_dim, name,
                err) ||
        get_int(root, "shared_expert_intermediate_size", 0, 0, &hp->shexp_ffn_dim, name, err) ||
        get_bool(root, "norm_topk_prob", mixtral, &hp->moe_norm_topk, name, err) ||
        get_int(root, "decoder_sparse_step", 0, 1, &hp->moe_step, name, err))
        return -1;
    if (hp->moe_step < 1)
        return err_set(err, "%s: \"decoder_sparse_step\" = %d must be at least 1", name,
                       hp->moe_step);
    const cJSON *dl = field(root, "mlp_only_layers");
    if (dl && !cJSON_IsArray(dl))
        return err_set(err, "%s: \"mlp_only_layers\" must be a list of layer numbers", name);
    for (const cJSON *e = dl ? dl->child : NULL; e; e = e->next) {
        int l;
        if (json_to_int(e, &l) || l < 0 || l >= HPARAMS_MAX_LAYERS)
            return err_set(err,
                           "%s: \"mlp_only_layers\" holds something other than a layer "
                           "number in [0, %d)",
                           name, HPARAMS_MAX_LAYERS);
        hp->moe_dense[l / 8] |= (unsigned char)(1u << (l % 8));
    }
    return 0;
}

int hfconfig_parse(struct model_hparams *hp, const char *json, size_t len, const char *name,
                   char *err) {
    memset(hp, 0, sizeof *hp);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return err_set(err, "%s: not valid JSON", name);
    int rc = -1, bias = 0;
    if (!cJSON_IsObject(root)) {
        err_set(err, "%s: not a JSON object", name);
        goto out;
    }
    if (get_arch(root, &hp->arch, name, err) ||
        get_int(root, "hidden_size", 1, 0, &hp->dim, name, err) ||
        get_int(root, "num_hidden_layers", 1, 0, &hp->n_layers, name, err) ||
        get_int(root, "num_attention_heads", 1, 0, &hp->n_heads, name, err) ||
        get_int(root, "num_key_value_heads", 0, hp->n_heads, &hp->n_kv_heads, name, err) ||
        get_int(root, "intermediate_size", 1, 0, &hp->ffn_dim, name, err) ||
        get_int(root, "vocab_size", 1, 0, &hp->vocab_size, name, err) ||
        get_int(root, "max_position_embeddings", 1, 0, &hp->max_ctx, name, err) ||
        get_float(root, "rms_norm_eps", 1, 0, &hp->norm_eps, name, err) ||
        get_bool(root, "tie_word_embeddings", 0, &hp->tied_embeddings, name, err) ||
        get_bool(root, "attention_bias", 0, &bias, name, err) ||
        get_token_id(root, "bos_token_id", &hp->bos_id, name, err) ||
        get_token_id(root, "eos_token_id", &hp->eos_id, name, err) ||
        get_rope(root, hp, name, err) || get_moe(root, hp, name, err))
        goto out;
    /* head_dim defaults to hidden/heads; a zero head count is refused by the validator. */
    int def_hd = hp->n_heads > 0 ? hp->dim / hp->n_heads : 0;
    if (get_int(root, "head_dim", 0, def_hd, &hp->head_dim, name, err)) goto out;
    hp->rope_neox = 1; /* HF applies rotate_half to un-permuted Q/K rows */
    hp->qkv_bias = hp->arch == ARCH_QWEN2 || bias;
    hp->qk_norm = hp->arch == ARCH_QWEN3;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int hfconfig_read_text(const char *path, size_t cap, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    char *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        err_set(err, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)st.st_size > cap) {
        err_set(err, "%s: %lld bytes is too large (limit %zu)", path, (long long)st.st_size, cap);
        goto out;
    }
    size_t n = (size_t)st.st_size, done = 0;
    buf = malloc(n ? n : 1);
    if (!buf) {
        err_set(err, "%s: out of memory", path);
        goto out;
    }
    while (done < n) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            err_set(err, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "early EOF");
            goto out;
        }
        done += (size_t)r;
    }
    *out = buf;
    *len = n;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

int hfconfig_load(struct model_hparams *hp, const char *path, char *err) {
    char *buf;
    size_t n;
    if (hfconfig_read_text(path, HFCONFIG_MAX_BYTES, &buf, &n, err)) return -1;
    int rc = hfconfig_parse(hp, buf, n, path, err);
    free(buf);
    return rc;
}
