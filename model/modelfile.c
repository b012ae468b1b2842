/* A model on disk, GGUF file or Hugging Face directory: tensor directory with GGUF names,
 * hyperparameters, and validation that the forward pass finds what it needs. */
#include "modelfile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "gguf.h"
#include "hfconfig.h"
#include "safetensors.h"
#include "tensors.h"

#define MF_MAX_INDEX_BYTES (64u << 20)
#define MF_MAX_FILES 4096

/* ---- GGUF ---------------------------------------------------------------------------- */

/* Takes ownership of fd: it is closed on failure. */
static int add_file(struct model_file *m, const char *path, int fd, char *err) {
    if (m->n_files >= MF_MAX_FILES) {
        close(fd);
        return err_set(err, "%s: more than %d files", path, MF_MAX_FILES);
    }
    m->paths = xrealloc(m->paths, (size_t)(m->n_files + 1) * sizeof *m->paths);
    m->fds = xrealloc(m->fds, (size_t)(m->n_files + 1) * sizeof *m->fds);
    m->paths[m->n_files] = xstrdup(path);
    m->fds[m->n_files] = fd;
    m->n_files++;
    return 0;
}

static int gguf_int(const struct gguf_file *g, const char *arch, const char *suffix, int required,
                    int def, int *out, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (!gguf_has_key(g, key)) {
        if (required) return err_set(err, "%s: metadata '%s' is missing", gguf_path(g), key);
        *out = def;
        return 0;
    }
    if (gguf_get_i64(g, key, &v))
        return err_set(err, "%s: metadata '%s' is not an integer", gguf_path(g), key);
    if (v < 0 || v > INT32_MAX)
        return err_set(err, "%s: metadata '%s' = %lld is out of range", gguf_path(g), key,
                       (long long)v);
    *out = (int)v;
    return 0;
}

static int gguf_float(const struct gguf_file *g, const char *arch, const char *suffix, int required,
                      float def, float *out, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_has_key(g, key)) {
        if (required) return err_set(err, "%s: metadata '%s' is missing", gguf_path(g), key);
        *out = def;
        return 0;
    }
    if (gguf_get_f32(g, key, out))
        return err_set(err, "%s: metadata '%s' is not a float", gguf_path(g), key);
    return 0;
}

static int gguf_token_id(const struct gguf_file *g, const char *key, int *out, char *err) {
    uint32_t v;
    *out = -1;
    if (!gguf_has_key(g, key)) return 0;
    if (gguf_get_u32(g, key, &v) || v > INT32_MAX)
        return err_set(err, "%s: metadata '%s' is not a valid token id", gguf_path(g), key);
    *out = (int)v;
    return 0;
}

/* GGUF writes rope scaling as `<arch>.rope.scaling.*`; llama3-style scaling normally
 * arrives as the rope_freqs.weight tensor instead and needs nothing here. */
static int gguf_rope_scaling(const struct gguf_file *g, const char *arch, struct model_hparams *hp,
                             char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const struct gguf_str *t = gguf_get_str(g, key);
    if (!t) {
        if (gguf_has_key(g, key))
            return err_set(err, "%s: metadata '%s' is not a string", gguf_path(g), key);
        return 0;
    }
    float factor;
    if (gguf_float(g, arch, "rope.scaling.factor", 0, 1.0f, &factor, err)) return -1;
    if ((t->len == 4 && !memcmp(t->s, "none", 4)) ||
        (t->len == 6 && !memcmp(t->s, "linear", 6) && factor == 1.0f))
        return 0;
    if (t->len == 6 && !memcmp(t->s, "llama3", 6)) {
        hp->rope_scaling_llama3 = 1;
        hp->rope_factor = factor;
        if (gguf_float(g, arch, "rope.scaling.low_freq_factor", 0, 1.0f, &hp->rope_low_freq_factor,
                       err) ||
            gguf_float(g, arch, "rope.scaling.high_freq_factor", 0, 4.0f,
                       &hp->rope_high_freq_factor, err) ||
            gguf_int(g, arch, "rope.scaling.original_context_length", 0, 8192, &hp->rope_orig_ctx,
                     err))
            return -1;
        return 0;
    }
    return err_set(err, "%s: rope scaling type '%.*s' (factor %g) is not supported", gguf_path(g),
                   (int)(t->len > 32 ? 32 : t->len), t->s, factor);
}

/* Mixture-of-experts keys as llama.cpp writes them: every layer sparse; the top-k weights
 * renormalized except in qwen2moe (llama.cpp's norm_w). */
static int gguf_moe(const struct gguf_file *g, const char *arch, struct model_hparams *hp,
                    char *err) {
    if (gguf_int(g, arch, "expert_count", 0, 0, &hp->n_experts, err)) return -1;
    if (!hp->n_experts) return 0;
    if (gguf_int(g, arch, "expert_used_count", 1, 0, &hp->n_experts_used, err) ||
        gguf_int(g, arch, "expert_feed_forward_length", 0, hp->ffn_dim, &hp->expert_ffn_dim, err) ||
        gguf_int(g, arch, "expert_shared_feed_forward_length", 0, 0, &hp->shexp_ffn_dim, err))
        return -1;
    hp->moe_norm_topk = strcmp(arch, "qwen2moe") != 0;
    hp->moe_step = 1;
    return 0;
}

static int gguf_hparams(struct model_file *m, char *err) {
    const struct gguf_file *g = m->gguf;
    struct model_hparams *hp = &m->hp;
    const struct gguf_str *a = gguf_get_str(g, "general.architecture");
    if (!a) return err_set(err, "%s: metadata 'general.architecture' is missing", gguf_path(g));
    char arch[16];
    if (a->len == 5 && !memcmp(a->s, "llama", 5)) {
        hp->arch = ARCH_LLAMA;
    } else if (a->len == 5 && !memcmp(a->s, "qwen2", 5)) {
        hp->arch = ARCH_QWEN2;
    } else if (a->len == 5 && !memcmp(a->s, "qwen3", 5)) {
        hp->arch = ARCH_QWEN3;
    } else if (a->len == 8 && !memcmp(a->s, "qwen2moe", 8)) {
        hp->arch = ARCH_QWEN2;
    } else if (a->len == 8 && !memcmp(a->s, "qwen3moe", 8)) {
        hp->arch = ARCH_QWEN3;
    } else {
        return err_set(err,
                       "%s: unsupported architecture '%.*s' (supported: llama, qwen2, "
                       "qwen3, qwen2moe, qwen3moe)",
                       gguf_path(g), (int)(a->len > 64 ? 64 : a->len), a->s);
    }
    snprintf(arch, sizeof arch, "%.*s", (int)a->len, a->s);
    if (gguf_int(g, arch, "block_count", 1, 0, &hp->n_layers, err) ||
        gguf_int(g, arch, "embedding_length", 1, 0, &hp->dim, err) ||
        gguf_int(g, arch, "attention.head_count", 1, 0, &hp->n_heads, err) ||
        gguf_int(g, arch, "attention.head_count_kv", 0, hp->n_heads, &hp->n_kv_heads, err) ||
        gguf_int(g, arch, "attention.key_length", 0, hp->n_heads > 0 ? hp->dim / hp->n_heads : 0,
                 &hp->head_dim, err) ||
        gguf_int(g, arch, "feed_forward_length", 1, 0, &hp->ffn_dim, err) ||
        gguf_int(g, arch, "context_length", 1, 0, &hp->max_ctx, err) ||
        gguf_float(g, arch, "attention.layer_norm_rms_epsilon", 1, 0, &hp->norm_eps, err) ||
        gguf_float(g, arch, "rope.freq_base", 0, 10000.0f, &hp->rope_theta, err) ||
        gguf_token_id(g, "tokenizer.ggml.bos_token_id", &hp->bos_id, err) ||
        gguf_token_id(g, "tokenizer.ggml.eos_token_id", &hp->eos_id, err) ||
        gguf_rope_scaling(g, arch, hp, err))
        return -1;
    /* Fields that must agree with head_dim: we implement full rotary and equal K/V widths. */
    int v_len, n_rot;
    if (gguf_int(g, arch, "attention.value_length", 0, hp->head_dim, &v_len, err) ||
        gguf_int(g, arch, "rope.dimension_count", 0, hp->head_dim, &n_rot, err))
        return -1;
    if (v_len != hp->head_dim)
        return err_set(err,
                       "%s: %s.attention.value_length %d differs from key_length %d "
                       "(not supported)",
                       gguf_path(g), arch, v_len, hp->head_dim);
    if (n_rot != hp->head_dim)
        return err_set(err,
                       "%s: %s.rope.dimension_count %d differs from head_dim %d "
                       "(partial rotary is not supported)",
                       gguf_path(g), arch, n_rot, hp->head_dim);
    /* Vocabulary: explicit key, else the tokenizer's list, else the embedding rows. */
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    const struct gguf_tensor_info *emb = gguf_find_tensor(g, "token_embd.weight");
    if (gguf_has_key(g, key)) {
        if (gguf_int(g, arch, "vocab_size", 1, 0, &hp->vocab_size, err)) return -1;
    } else if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data)) {
        hp->vocab_size = n > INT32_MAX ? INT32_MAX : (int)n;
    } else if (emb) {
        hp->vocab_size = emb->ne[1] > INT32_MAX ? INT32_MAX : (int)emb->ne[1];
    }
    hp->rope_neox = hp->arch != ARCH_LLAMA; /* llama.cpp permutes llama Q/K for pairs */
    hp->qkv_bias = hp->arch == ARCH_QWEN2;
    hp->qk_norm = hp->arch == ARCH_QWEN3;
    return gguf_moe(g, arch, hp, err);
}

static int open_gguf(struct model_file *m, const char *path, char *err) {
    if (gguf_open(&m->gguf, path, err)) return -1;
    int fd = dup(gguf_fd(m->gguf));
    if (fd < 0) return err_set(err, "%s: dup failed: %s", path, strerror(errno));
    if (add_file(m, path, fd, err)) return -1;
    uint64_t n = gguf_n_tensors(m->gguf);
    m->tensors = xcalloc(n ? n : 1, sizeof *m->tensors); /* n is what the GGUF reader holds */
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor_info *ti = gguf_tensor(m->gguf, i);
        struct mf_tensor *t = &m->tensors[m->n_tensors++];
        t->name = xstrndup(ti->name.s, ti->name.len);
        t->type = ti->type;
        t->n_dims = (int)ti->n_dims;
        memcpy(t->ne, ti->ne, sizeof t->ne);
        t->file = 0;
        t->offset = ti->offset;
        t->nbytes = ti->nbytes;
    }
    return gguf_hparams(m, err);
}

/* ---- Hugging Face directory --------------------------------------------------------- */

/* Adds one safetensors tensor under its GGUF name (if it is one we use); an FP8 weight's
 * scale under "<GGUF name of the weight>.scale". */
/* An INT4 checkpoint's packed weight (under the GGUF name of its weight, with the shape it
 * stands for) or one of its parts (under "<that name><suffix>"). */
static int add_int4_tensor(struct model_file *m, const struct safetensors_tensor *st,
                           enum int4w_part p, const char *name, int file, const char *path,
                           char *err) {
    int64_t ne[2];
    if (p == INT4W_PACKED && int4w_logical_shape(&m->int4, st->shape, st->n_dims, ne))
        return err_set(err, "%s: tensor '%s': a packed INT4 weight must have 2 dimensions", path,
                       st->name);
    if (st->n_dims < 1 || st->n_dims > 4)
        return err_set(err, "%s: tensor '%s': %d dimensions (1 to 4 supported)", path, st->name,
                       st->n_dims);
    struct mf_tensor *t = &m->tensors[m->n_tensors++];
    char full[112];
    snprintf(full, sizeof full, "%s%s", name, int4w_part_suffix[p]);
    t->name = xstrdup(full);
    t->src_name = xstrdup(st->name);
    t->type = p == INT4W_PACKED ? DT_I4_S32 : st->supported ? st->type : DT_F32;
    t->int4 = (int)p;
    snprintf(t->qdtype, sizeof t->qdtype, "%s", st->dtype);
    t->n_dims = st->n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < st->n_dims ? st->shape[st->n_dims - 1 - d] : 1;
    if (p == INT4W_PACKED) t->ne[0] = ne[0], t->ne[1] = ne[1];
    t->file = file;
    t->offset = st->offset;
    t->nbytes = st->nbytes;
    return 0;
}

static int add_st_tensor(struct model_file *m, const struct safetensors_tensor *st, int file,
                         const char *path, char *err) {
    char name[96], wname[256];
    enum int4w_part p = int4w_part_of(&m->int4, st->name, wname, sizeof wname);
    if (p != INT4W_NOT) {
        if (!tensor_hf_to_gguf(wname, name, sizeof name)) return 0;
        return add_int4_tensor(m, st, p, name, file, path, err);
    }
    int scale = 0, fp8 = !strcmp(st->dtype, "F8_E4M3");
    if (!tensor_hf_to_gguf(st->name, name, sizeof name)) {
        size_t ln = strlen(st->name);
        if (ln > 12 && !strcmp(st->name + ln - 12, ".input_scale") &&
            snprintf(wname, sizeof wname, "%.*s.weight", (int)(ln - 12), st->name) <
                (int)sizeof wname &&
            tensor_hf_to_gguf(wname, name, sizeof name))
            return err_set(err,
                           "%s: tensor '%s': static activation scales are not supported "
                           "(dynamic FP8 activations are, as W8A16)",
                           path, st->name);
        if (!fp8w_scale_of(&m->fp8, st->name, wname, sizeof wname) ||
            !tensor_hf_to_gguf(wname, name, sizeof name) || strlen(name) + 7 > sizeof name)
            return 0;
        strcat(name, ".scale");
        scale = 1;
    }
    if (fp8 && m->fp8.scheme == FP8W_NONE)
        return err_set(err,
                       "%s: tensor '%s': dtype F8_E4M3 but config.json has no FP8 "
                       "quantization_config",
                       path, st->name);
    if (!st->supported && !fp8)
        return err_set(err, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16%s)", path,
                       st->name, st->dtype, m->fp8.scheme ? ", F8_E4M3" : "");
    if (st->n_dims < (scale ? 0 : 1) || st->n_dims > 4)
        return err_set(err, "%s: tensor '%s': %d dimensions (1 to 4 supported)", path, st->name,
                       st->n_dims);
    struct mf_tensor *t = &m->tensors[m->n_tensors++];
    t->name = xstrdup(name);
    t->src_name = xstrdup(st->name);
    t->type = fp8 ? DT_F8_E4M3_S32 : st->type;
    t->fp8 = fp8;
    t->n_dims = st->n_dims;
    /* safetensors shapes are outermost first; GGUF ne[0] is the contiguous dimension. */
    for (int d = 0; d < 4; d++) t->ne[d] = d < st->n_dims ? st->shape[st->n_dims - 1 - d] : 1;
    t->file = file;
    t->offset = st->offset;
    t->nbytes = st->nbytes;
    return 0;
}

static int grow_tensors(struct model_file *m, int more, char *err) {
    struct mf_tensor *t = realloc(m->tensors, (size_t)(m->n_tensors + more + 1) * sizeof *t);
    if (!t) return err_set(err, "out of memory");
    memset(t + m->n_tensors, 0, (size_t)(more + 1) * sizeof *t);
    m->tensors = t;
    return 0;
}

static int open_shard(struct model_file *m, struct safetensors_file *st, const char *path,
                      char *err) {
    if (safetensors_open(st, path, err)) return -1;
    int fd = dup(st->fd);
    if (fd < 0) {
        safetensors_close(st);
        return err_set(err, "%s: dup failed: %s", path, strerror(errno));
    }
    if (add_file(m, path, fd, err)) {
        safetensors_close(st);
        return -1;
    }
    return 0;
}

static int open_hf_single(struct model_file *m, const char *path, char *err) {
    struct safetensors_file st;
    if (open_shard(m, &st, path, err)) return -1;
    int rc = grow_tensors(m, st.n_tensors, err);
    for (int i = 0; i < st.n_tensors && !rc; i++)
        rc = add_st_tensor(m, &st.tensors[i], 0, path, err);
    safetensors_close(&st);
    return rc;
}

/* A shard file name from the index must stay inside the model directory. */
static int shard_name_ok(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256;
}

static int open_hf_index(struct model_file *m, const char *dir, const char *index_path, char *err) {
    char *text = NULL;
    size_t len;
    cJSON *root = NULL;
    char **shards = NULL;
    int n_shards = 0, rc = -1;
    if (hfconfig_read_text(index_path, MF_MAX_INDEX_BYTES, &text, &len, err)) return -1;
    root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return err_set(err, "%s: not valid JSON", index_path);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        err_set(err, "%s: missing \"weight_map\" object", index_path);
        goto out;
    }
    /* Distinct shard names, in first-seen order (small lists: linear search). */
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
            err_set(err,
                    "%s: weight_map entry '%.96s' must name a file in the model "
                    "directory (found '%.96s')",
                    index_path, e->string, cJSON_IsString(e) ? e->valuestring : "(not a string)");
            goto out;
        }
        int k = 0;
        while (k < n_shards && strcmp(shards[k], e->valuestring)) k++;
        if (k == n_shards) {
            if (n_shards >= MF_MAX_FILES) {
                err_set(err, "%s: more than %d shards", index_path, MF_MAX_FILES);
                goto out;
            }
            shards = xrealloc(shards, (size_t)(n_shards + 1) * sizeof *shards);
            shards[n_shards++] = e->valuestring;
        }
    }
    if (grow_tensors(m, cJSON_GetArraySize(wm), err)) goto out;
    for (int k = 0; k < n_shards; k++) {
        char path[4096];
        struct safetensors_file st;
        snprintf(path, sizeof path, "%s/%s", dir, shards[k]);
        if (access(path, F_OK)) {
            err_set(err, "%s: shard '%s' listed in model.safetensors.index.json: %s", dir,
                    shards[k], strerror(errno));
            goto out;
        }
        if (open_shard(m, &st, path, err)) goto out;
        int file = m->n_files - 1, bad = 0;
        for (const cJSON *e = wm->child; e && !bad; e = e->next) {
            if (strcmp(e->valuestring, shards[k])) continue;
            const struct safetensors_tensor *t = safetensors_find(&st, e->string);
            if (!t)
                bad = err_set(err,
                              "%s: tensor '%.96s' listed in the index is not in this "
                              "shard",
                              path, e->string);
            else bad = add_st_tensor(m, t, file, path, err);
        }
        safetensors_close(&st);
        if (bad) goto out;
    }
    rc = 0;
out:
    free(shards);
    cJSON_Delete(root);
    return rc;
}

static int open_hf(struct model_file *m, const char *dir, char *err) {
    char path[4096];
    m->hf_dir = xstrdup(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hfconfig_load(&m->hp, path, err)) return -1;
    char *text;
    size_t len;
    if (hfconfig_read_text(path, HFCONFIG_MAX_BYTES, &text, &len, err)) return -1;
    int rc = int4w_config_parse(&m->int4, text, len, path, err);
    if (!rc && m->int4.format == INT4W_NONE) rc = fp8w_config_parse(&m->fp8, text, len, path, err);
    free(text);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!access(path, F_OK)) return open_hf_index(m, dir, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!access(path, F_OK)) return open_hf_single(m, path, err);
    return err_set(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
}

/* ---- validation --------------------------------------------------------------------- */

static int by_name_cmp(const void *a, const void *b, void *ctx) {
    const struct mf_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static int build_index(struct model_file *m, const char *path, char *err) {
    m->by_name = xmalloc((m->n_tensors ? (size_t)m->n_tensors : 1) * sizeof *m->by_name);
    for (int i = 0; i < m->n_tensors; i++) m->by_name[i] = i;
    qsort_r(m->by_name, (size_t)m->n_tensors, sizeof *m->by_name, by_name_cmp, m->tensors);
    for (int i = 1; i < m->n_tensors; i++) {
        const struct mf_tensor *a = &m->tensors[m->by_name[i - 1]];
        const struct mf_tensor *b = &m->tensors[m->by_name[i]];
        if (!strcmp(a->name, b->name))
            return err_set(err, "%s: two tensors map to '%s' ('%s' and '%s')", path, a->name,
                           a->src_name ? a->src_name : a->name,
                           b->src_name ? b->src_name : b->name);
    }
    return 0;
}

static int check_hparams(const struct model_hparams *hp, const char *path, char *err) {
    static const struct {
        const char *name;
        int max;
    } lim[] = {
        {"n_layers", 1024}, {"dim", 1 << 17},     {"n_heads", 1024},       {"n_kv_heads", 1024},
        {"head_dim", 1024}, {"ffn_dim", 1 << 20}, {"vocab_size", 1 << 22}, {"max_ctx", 1 << 24},
    };
    const int val[] = {hp->n_layers, hp->dim,     hp->n_heads,    hp->n_kv_heads,
                       hp->head_dim, hp->ffn_dim, hp->vocab_size, hp->max_ctx};
    for (size_t i = 0; i < sizeof val / sizeof val[0]; i++)
        if (val[i] < 1 || val[i] > lim[i].max)
            return err_set(err, "%s: %s = %d is out of range [1, %d]", path, lim[i].name, val[i],
                           lim[i].max);
    if (hp->n_heads % hp->n_kv_heads)
        return err_set(err, "%s: n_heads %d is not divisible by n_kv_heads %d", path, hp->n_heads,
                       hp->n_kv_heads);
    if (hp->head_dim % 2)
        return err_set(err, "%s: head_dim %d is odd (rotary needs pairs)", path, hp->head_dim);
    if (!isfinite(hp->norm_eps) || hp->norm_eps <= 0 || hp->norm_eps >= 1)
        return err_set(err, "%s: rms norm epsilon %g is out of range (0, 1)", path, hp->norm_eps);
    if (!isfinite(hp->rope_theta) || hp->rope_theta <= 0)
        return err_set(err, "%s: rope theta %g must be positive", path, hp->rope_theta);
    if (hp->rope_scaling_llama3 &&
        (!isfinite(hp->rope_factor) || hp->rope_factor < 1 || !isfinite(hp->rope_low_freq_factor) ||
         hp->rope_low_freq_factor <= 0 || !isfinite(hp->rope_high_freq_factor) ||
         hp->rope_high_freq_factor <= hp->rope_low_freq_factor || hp->rope_orig_ctx < 1))
        return err_set(err,
                       "%s: llama3 rope scaling (factor %g, low %g, high %g, original "
                       "context %d) is invalid",
                       path, hp->rope_factor, hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                       hp->rope_orig_ctx);
    if (hp->n_experts &&
        (hp->n_experts > 4096 || hp->n_experts_used < 1 || hp->n_experts_used > hp->n_experts ||
         hp->expert_ffn_dim < 1 || hp->expert_ffn_dim > (1 << 20) || hp->shexp_ffn_dim < 0 ||
         hp->shexp_ffn_dim > (1 << 20)))
        return err_set(err,
                       "%s: mixture of experts: %d experts, %d used per token, expert "
                       "MLP size %d, shared expert size %d: need 1 <= used <= experts <= "
                       "4096 and sizes in [1, 2^20]",
                       path, hp->n_experts, hp->n_experts_used, hp->expert_ffn_dim,
                       hp->shexp_ffn_dim);
    if (hp->bos_id >= hp->vocab_size || hp->eos_id >= hp->vocab_size)
        return err_set(err, "%s: bos/eos token id %d/%d is outside the vocabulary (%d)", path,
                       hp->bos_id, hp->eos_id, hp->vocab_size);
    return 0;
}

/* Tensor t (row id) has shape [ne0, ne1, ne2] and a type its role allows. */
static int check_shape(const struct model_file *m, const struct mf_tensor *t, enum tensor_id id,
                       int64_t ne0, int64_t ne1, int64_t ne2, char *err) {
    const char *src = t->src_name ? t->src_name : t->name;
    const char *path = m->paths[t->file]; /* name the file the tensor lives in (HF shards) */
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        char want[96], got[192];
        if (ne2 != 1)
            snprintf(want, sizeof want, "[%lld, %lld, %lld]", (long long)ne0, (long long)ne1,
                     (long long)ne2);
        else if (tensor_is_matrix(id))
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
        else snprintf(want, sizeof want, "[%lld]", (long long)ne0);
        int n = snprintf(got, sizeof got, "[%lld", (long long)t->ne[0]);
        for (int d = 1; d < t->n_dims && d < 4; d++)
            n += snprintf(got + n, sizeof got - (size_t)n, ", %lld", (long long)t->ne[d]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        /* HF users know the [rows, cols] order of safetensors. */
        char hf[192] = "";
        if (t->src_name) {
            n = snprintf(hf, sizeof hf, " (safetensors shape [");
            for (int d = t->n_dims - 1; d >= 0; d--)
                n += snprintf(hf + n, sizeof hf - (size_t)n, "%lld%s", (long long)t->ne[d],
                              d ? ", " : "])");
        }
        return err_set(err, "%s: tensor '%s': expected shape %s (ne order), found %s%s", path, src,
                       want, got, hf);
    }
    if (!tensor_type_ok(id, t->type))
        return err_set(err, "%s: tensor '%s': type %s is not allowed here (expected %s)", path, src,
                       dtype_name(t->type), tensor_types(id));
    return 0;
}

/* How the file spells expert tensors, for messages: GGUF, or HF as Qwen or Mixtral do. */
static enum tensor_naming spelling(const struct model_file *m) {
    if (!m->hf_dir) return TNAMES_GGUF;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].src_name && strstr(m->tensors[i].src_name, ".block_sparse_moe."))
            return TNAMES_HF_ALT;
    return TNAMES_HF;
}

/* An expert row of layer `layer`: one 3-D tensor of every expert (GGUF), or one tensor per
 * expert (HF), each of the table's shape. */
static int check_experts(const struct model_file *m, enum tensor_id id, int layer, const char *path,
                         char *err) {
    const struct model_hparams *hp = &m->hp;
    const struct tensor_info *ti = tensor_info(id);
    int64_t ne0 = tensor_dim_size(hp, ti->ne0), ne1 = tensor_dim_size(hp, ti->ne1);
    const struct mf_tensor *t = modelfile_tensor(m, id, layer);
    if (t) return check_shape(m, t, id, ne0, ne1, hp->n_experts, err);
    if (!tensor_needed(hp, id, layer, 0)) return 0;
    for (int e = 0; e < hp->n_experts; e++) {
        char name[128];
        int64_t row0;
        if (!(t = modelfile_expert(m, id, layer, e, &row0))) {
            tensor_expert_name(id, layer, e, spelling(m), name, sizeof name);
            return err_set(err,
                           "%s: missing tensor '%s' (expert %d of the %d the config "
                           "declares)",
                           path, name, e, hp->n_experts);
        }
        if (check_shape(m, t, id, ne0, ne1, 1, err)) return -1;
    }
    return 0;
}

/* Tensor id of layer `layer` (model-wide rows: any layer): shape and type as the table says,
 * or absent when it is not required. */
static int check_tensor(const struct model_file *m, enum tensor_id id, int layer, const char *path,
                        char *err) {
    const struct model_hparams *hp = &m->hp;
    const struct tensor_info *ti = tensor_info(id);
    if (ti->ne2 == TDIM_EXPERTS) return check_experts(m, id, layer, path, err);
    const struct mf_tensor *t = modelfile_tensor(m, id, layer);
    if (!t) {
        if (!tensor_needed(hp, id, layer, 0)) return 0;
        char name[96];
        tensor_name(id, layer, TNAMES_GGUF, name, sizeof name);
        return err_set(err, "%s: missing tensor '%s'", path, name);
    }
    return check_shape(m, t, id, tensor_dim_size(hp, ti->ne0), tensor_dim_size(hp, ti->ne1), 1,
                       err);
}

/* An HF expert tensor whose index is outside the config's expert count: the two disagree. */
static int check_expert_ids(const struct model_file *m, const char *path, char *err) {
    for (int i = 0; i < m->n_tensors; i++) {
        const char *x = strstr(m->tensors[i].name, "_exps.");
        if (!x || !m->tensors[i].src_name) continue;
        long e = strtol(x + 6, NULL, 10);
        if (e >= m->hp.n_experts)
            return err_set(err,
                           "%s: tensor '%s' is expert %ld, but the config declares %d "
                           "experts",
                           path, m->tensors[i].src_name, e, m->hp.n_experts);
    }
    return 0;
}

/* Every tensor of the table, model-wide then layer by layer, with the shape it must have.
 * What the file holds decides the optional parts first: biases, QK-norm, an LM head of its
 * own. */
static int validate(struct model_file *m, const char *path, char *err) {
    struct model_hparams *hp = &m->hp;
    if (modelfile_tensor(m, TENSOR_ATTN_Q_BIAS, 0)) hp->qkv_bias = 1;
    if (modelfile_tensor(m, TENSOR_ATTN_Q_NORM, 0)) hp->qk_norm = 1;
    if (!modelfile_tensor(m, TENSOR_OUTPUT, 0)) hp->tied_embeddings = 1;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (check_hparams(hp, m->hf_dir ? cfg : path, err)) return -1;
    for (int id = 0; id < TENSOR_COUNT; id++)
        if (tensor_info(id)->scope != TSCOPE_LAYER && check_tensor(m, id, -1, path, err)) return -1;
    for (int l = 0; l < hp->n_layers; l++)
        for (int id = 0; id < TENSOR_COUNT; id++)
            if (tensor_info(id)->scope == TSCOPE_LAYER && check_tensor(m, id, l, path, err))
                return -1;
    return check_expert_ids(m, path, err);
}

/* ---- public ------------------------------------------------------------------------- */

uint64_t modelfile_held_bytes(const struct model_file *m) {
    uint64_t sum = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct mf_tensor *t = &m->tensors[i];
        size_t ln = strlen(t->name);
        int fp8_scale = m->fp8.scheme != FP8W_NONE && ln > 6 && !strcmp(t->name + ln - 6, ".scale");
        if (t->int4 > INT4W_PACKED || fp8_scale) continue; /* inside their weight's blocks */
        int64_t rb = t->int4 || t->fp8 ? dtype_row_bytes(t->type, t->ne[0]) : -1;
        sum += rb >= 0 ? (uint64_t)rb * (uint64_t)t->ne[1] : t->nbytes;
    }
    return sum;
}

int modelfile_open(struct model_file *m, const char *path, char *err) {
    memset(m, 0, sizeof *m);
    struct stat st;
    if (stat(path, &st)) return err_set(err, "%s: %s", path, strerror(errno));
    int rc;
    if (S_ISDIR(st.st_mode)) rc = open_hf(m, path, err);
    else if (S_ISREG(st.st_mode)) rc = open_gguf(m, path, err);
    else rc = err_set(err, "%s: neither a GGUF file nor a model directory", path);
    if (!rc) rc = build_index(m, path, err);
    if (!rc) rc = validate(m, path, err);
    if (rc) modelfile_close(m);
    return rc;
}

void modelfile_close(struct model_file *m) {
    for (int i = 0; m->tensors && i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].src_name);
    }
    free(m->tensors);
    for (int i = 0; i < m->n_files; i++) {
        free(m->paths[i]);
        if (m->fds[i] >= 0) close(m->fds[i]);
    }
    free(m->paths);
    free(m->fds);
    gguf_close(m->gguf);
    free(m->hf_dir);
    free(m->by_name);
    memset(m, 0, sizeof *m);
}

const struct mf_tensor *modelfile_find(const struct model_file *m, const char *name) {
    int lo = 0, hi = m->n_tensors - 1;
    while (m->by_name && lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const struct mf_tensor *t = &m->tensors[m->by_name[mid]];
        int c = strcmp(name, t->name);
        if (!c) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const struct mf_tensor *modelfile_tensor(const struct model_file *m, enum tensor_id id, int layer) {
    char name[96];
    if (tensor_name(id, layer, TNAMES_GGUF, name, sizeof name)) return NULL;
    return modelfile_find(m, name);
}

const struct mf_tensor *modelfile_expert(const struct model_file *m, enum tensor_id id, int layer,
                                         int expert, int64_t *row0) {
    const struct mf_tensor *t = modelfile_tensor(m, id, layer);
    if (t) {
        *row0 = (int64_t)expert * t->ne[1];
        return t;
    }
    char name[128];
    *row0 = 0;
    if (tensor_expert_name(id, layer, expert, TNAMES_GGUF, name, sizeof name)) return NULL;
    return modelfile_find(m, name);
}

int modelfile_read(const struct model_file *m, const struct mf_tensor *t, uint64_t off,
                   uint64_t len, void *dst, char *err) {
    if (t->file < 0 || t->file >= m->n_files)
        return err_set(err, "tensor '%s': bad file index %d", t->name, t->file);
    uint64_t end;
    if (size_add(off, len, &end) || end > t->nbytes)
        return err_set(err,
                       "%s: tensor '%s': read of %llu bytes at %llu is outside its %llu "
                       "bytes",
                       m->paths[t->file], t->name, (unsigned long long)len, (unsigned long long)off,
                       (unsigned long long)t->nbytes);
    uint64_t done = 0, pos = t->offset + off;
    while (done < len) {
        size_t chunk = len - done > (1u << 30) ? (1u << 30) : (size_t)(len - done);
        ssize_t r = pread(m->fds[t->file], (char *)dst + done, chunk, (off_t)(pos + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return err_set(err, "%s: tensor '%s': read at byte %llu failed: %s", m->paths[t->file],
                           t->name, (unsigned long long)(pos + done), strerror(errno));
        if (r == 0)
            return err_set(err,
                           "%s: tensor '%s': file ends at byte %llu, %llu bytes short "
                           "(truncated since it was opened?)",
                           m->paths[t->file], t->name, (unsigned long long)(pos + done),
                           (unsigned long long)(len - done));
        done += (uint64_t)r;
    }
    return 0;
}
