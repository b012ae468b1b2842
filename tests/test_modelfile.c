// link: tpd_testutil_model
/* modelfile tests on GGUF files: tiny Llama/Qwen2/Qwen3 models written here
 * (tests/testutil_model.h) must open with the right hyperparameters, GGUF tensor names,
 * shapes in ne order and readable data; broken variants (missing or misshapen tensors, bad
 * types, missing or mistyped metadata) must be refused with messages naming the tensor or
 * field. The real SmolLM2 GGUF is compared against tests/data/smollm2_q4_1.json, written
 * from the `gguf` Python package's reading. Hugging Face directories: test_modelfile_hf.c.
 *
 * With TPD_MF_MODEL and TPD_MF_EXPECT set, only that comparison runs, on that model (GGUF
 * file or HF directory; tests/py/test_modelfile_py.py uses this for models written by
 * gguf / safetensors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/modelfile.h"
#include "testutil.h"
#include "testutil_model.h"
#include "util/err.h"

static void test_gguf_llama(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    struct tm_tensor t[128];
    int nt;
    const char *path = tm_write_gguf(&s, "llama.gguf", t, &nt);
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(nt, 2 + 2 * 9);
    const struct model_hparams *hp = &m.hp;
    tm_check_default_shape(hp);
    assert_int_equal(hp->max_ctx, 4096);
    assert_true(hp->norm_eps == 1e-5f);
    assert_true(hp->rope_theta == 500000.0f);
    assert_int_equal(hp->rope_neox, 0);
    assert_int_equal(hp->rope_scaling_llama3, 0);
    assert_int_equal(hp->qk_norm, 0);
    assert_int_equal(hp->bos_id, 1);
    assert_int_equal(hp->eos_id, 2);
    assert_non_null(m.gguf);
    assert_null(m.hf_dir);
    assert_int_equal(m.n_files, 1);
    assert_string_equal(m.paths[0], path);
    tm_check_tensors(&m, t, nt);
    assert_null(modelfile_find(&m, "output.weight"));
    assert_null(modelfile_find(&m, "blk.2.attn_q.weight"));
    /* Reads outside the tensor are refused. */
    const struct mf_tensor *q = modelfile_find(&m, "blk.1.attn_q.weight");
    uint8_t tmp[8];
    assert_int_equal(modelfile_read(&m, q, q->nbytes - 2, 4, tmp, err), -1);
    assert_non_null(strstr(err, "tensor 'blk.1.attn_q.weight': read of 4 bytes"));
    assert_int_equal(modelfile_read(&m, q, UINT64_MAX, 2, tmp, err), -1);
    assert_int_equal(modelfile_read(&m, q, q->nbytes, 0, tmp, err), 0);
    modelfile_close(&m);
}

static void test_gguf_qwen(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    s.arch = "qwen2";
    s.tied = 0;
    s.bias = 1;
    s.mat_type = DT_F16;
    s.emb_type = DT_BF16;
    struct tm_tensor t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *path = tm_write_gguf(&s, "qwen2.gguf", t, &nt);
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN2);
    assert_int_equal(m.hp.rope_neox, 1);
    assert_int_equal(m.hp.tied_embeddings, 0);
    assert_int_equal(m.hp.qkv_bias, 1);
    tm_check_tensors(&m, t, nt);
    modelfile_close(&m);
    /* Qwen2 without biases is a broken file. */
    s.bias = 0;
    tm_expect_open_fails(tm_write_gguf(&s, "qwen2nb.gguf", t, &nt),
                         "missing tensor 'blk.0.attn_q.bias'");

    /* Qwen3: head_dim differs from dim / heads, per-head q/k norms, rope_freqs tensor. */
    s = tm_default_spec();
    s.arch = "qwen3";
    s.head_dim = 32;
    s.qknorm = 1;
    s.rope_freqs = 1;
    s.mat_type = DT_Q8_0;
    path = tm_write_gguf(&s, "qwen3.gguf", t, &nt);
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN3);
    assert_int_equal(m.hp.head_dim, 32);
    assert_int_equal(m.hp.qk_norm, 1);
    assert_int_equal(m.hp.qkv_bias, 0);
    assert_int_equal(modelfile_find(&m, "blk.0.attn_q.weight")->ne[1], 4 * 32);
    assert_int_equal(modelfile_find(&m, "rope_freqs.weight")->ne[0], 16);
    tm_check_tensors(&m, t, nt);
    modelfile_close(&m);
    s.qknorm = 0;
    tm_expect_open_fails(tm_write_gguf(&s, "qwen3nn.gguf", t, &nt),
                         "missing tensor 'blk.0.attn_q_norm.weight'");
}

static void test_gguf_bad_models(void **state) {
    (void)state;
    struct tm_tensor t[128];
    int nt;
    static const struct {
        const char *arch, *drop, *alter;
        uint32_t alter_type;
        int64_t ne0, ne1;
        const char *skip_key, *string_key;
        int kv, heads, head_dim, meta_layers;
        const char *msg;
    } cases[] = {
        {NULL, "blk.1.ffn_up.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0,
         "missing tensor 'blk.1.ffn_up.weight'"},
        {NULL, "token_embd.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0,
         "missing tensor 'token_embd.weight'"},
        {NULL, "output_norm.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0,
         "missing tensor 'output_norm.weight'"},
        {NULL, NULL, "blk.0.attn_k.weight", 0xffffffffu, 0, 64, NULL, NULL, 0, 0, 0, 0,
         "tensor 'blk.0.attn_k.weight': expected shape [64, 32] (ne order), found [64, 64]"},
        {NULL, NULL, "blk.1.ffn_down.weight", 0xffffffffu, 64, 96, NULL, NULL, 0, 0, 0, 0,
         "tensor 'blk.1.ffn_down.weight': expected shape [96, 64] (ne order), found [64, 96]"},
        {NULL, NULL, "blk.0.attn_norm.weight", 0xffffffffu, 32, 0, NULL, NULL, 0, 0, 0, 0,
         "tensor 'blk.0.attn_norm.weight': expected shape [64] (ne order), found [32]"},
        {NULL, NULL, "token_embd.weight", 0xffffffffu, 0, 100, NULL, NULL, 0, 0, 0, 0,
         "tensor 'token_embd.weight': expected shape [64, 128] (ne order), found [64, 100]"},
        {NULL, NULL, "blk.0.ffn_norm.weight", DT_Q8_0, 0, 0, NULL, NULL, 0, 0, 0, 0,
         "tensor 'blk.0.ffn_norm.weight': type Q8_0 is not allowed here (expected F32, F16 or "
         "BF16)"},
        {"gemma", NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, "unsupported architecture 'gemma'"},
        {NULL, NULL, NULL, 0, 0, 0, "block_count", NULL, 0, 0, 0, 0,
         "metadata 'llama.block_count' is missing"},
        {NULL, NULL, NULL, 0, 0, 0, "attention.layer_norm_rms_epsilon", NULL, 0, 0, 0, 0,
         "metadata 'llama.attention.layer_norm_rms_epsilon' is missing"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, "embedding_length", 0, 0, 0, 0,
         "metadata 'llama.embedding_length' is not an integer"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 3, 0, 0, 0,
         "n_heads 4 is not divisible by n_kv_heads 3"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, -1, 0,
         "head_dim = 0 is out of range [1, 1024]"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 2000,
         "n_layers = 2000 is out of range [1, 1024]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tm_spec s = tm_default_spec();
        if (cases[i].arch) s.arch = cases[i].arch;
        s.drop = cases[i].drop;
        s.alter = cases[i].alter;
        s.alter_type = cases[i].alter_type;
        s.alter_ne0 = cases[i].ne0;
        s.alter_ne1 = cases[i].ne1;
        s.skip_key = cases[i].skip_key;
        s.string_key = cases[i].string_key;
        if (cases[i].kv) s.kv = cases[i].kv;
        if (cases[i].head_dim) s.head_dim = cases[i].head_dim < 0 ? 0 : cases[i].head_dim;
        s.meta_layers = cases[i].meta_layers;
        const char *path = tm_write_gguf(&s, "bad.gguf", t, &nt);
        tm_expect_open_fails(path, cases[i].msg);
        tm_expect_open_fails(path, path);
    }
    tm_expect_open_fails("/nonexistent/model.gguf", "/nonexistent/model.gguf: No such file");
    /* Not a GGUF at all. */
    const char *path = tu_write_tmp("text.gguf", "hello world, not a model", 24);
    tm_expect_open_fails(path, "not a GGUF file (bad magic");
}

/* ---- comparison with the gguf / safetensors Python packages ------------------------- */

static uint32_t crc_table[256];

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    if (!crc_table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static const char *ref_model, *ref_json;

static int jint(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j)) fail_msg("expectation: \"%s\" missing", key);
    return j->valueint;
}

static void compare_model(const char *model, const char *json) {
    char *text = tu_read_file(json, NULL);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, model, err)) fail_msg("%s", err);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "hparams");
    const struct model_hparams *hp = &m.hp;
#define HP_INT(f) \
    if ((int)hp->f != jint(h, #f)) fail_msg("hparams." #f ": %d != %d", (int)hp->f, jint(h, #f))
    HP_INT(arch);
    HP_INT(n_layers);
    HP_INT(dim);
    HP_INT(n_heads);
    HP_INT(n_kv_heads);
    HP_INT(head_dim);
    HP_INT(ffn_dim);
    HP_INT(vocab_size);
    HP_INT(max_ctx);
    HP_INT(rope_neox);
    HP_INT(rope_scaling_llama3);
    HP_INT(tied_embeddings);
    HP_INT(qkv_bias);
    HP_INT(qk_norm);
    HP_INT(bos_id);
    HP_INT(eos_id);
#undef HP_INT
    assert_true(hp->norm_eps ==
                (float)cJSON_GetObjectItemCaseSensitive(h, "norm_eps")->valuedouble);
    assert_true(hp->rope_theta ==
                (float)cJSON_GetObjectItemCaseSensitive(h, "rope_theta")->valuedouble);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    assert_int_equal(m.n_tensors, cJSON_GetArraySize(ts));
    size_t cap = 1 << 20;
    uint8_t *chunk = malloc(cap);
    for (const cJSON *e = ts->child; e; e = e->next) {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        const struct mf_tensor *t = modelfile_find(&m, name);
        if (!t) fail_msg("tensor %s not found", name);
        assert_int_equal(t->type, jint(e, "type"));
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(e, "ne");
        assert_int_equal(t->n_dims, cJSON_GetArraySize(ne));
        int d = 0;
        for (const cJSON *x = ne->child; x; x = x->next, d++)
            assert_int_equal(t->ne[d], strtoll(x->valuestring, NULL, 10));
        for (; d < 4; d++) assert_int_equal(t->ne[d], 1);
        assert_int_equal(
            t->nbytes,
            strtoull(cJSON_GetObjectItemCaseSensitive(e, "nbytes")->valuestring, NULL, 10));
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "offset");
        if (off) assert_int_equal(t->offset, strtoull(off->valuestring, NULL, 10));
        uint32_t crc = 0;
        for (uint64_t pos = 0; pos < t->nbytes; pos += cap) {
            uint64_t n = t->nbytes - pos < cap ? t->nbytes - pos : cap;
            if (modelfile_read(&m, t, pos, n, chunk, err)) fail_msg("%s", err);
            crc = crc32_update(crc, chunk, n);
        }
        unsigned want = (unsigned)strtoul(cJSON_GetObjectItemCaseSensitive(e, "crc32")->valuestring,
                                          NULL, 16);
        if (crc != want) fail_msg("tensor %s: crc %08x != %08x", name, crc, want);
    }
    free(chunk);
    modelfile_close(&m);
    cJSON_Delete(root);
}

static void test_compare_reference(void **state) {
    (void)state;
    if (access(ref_model, R_OK) || access(ref_json, R_OK)) {
        print_message("skipped: %s or %s absent\n", ref_model, ref_json);
        skip();
    }
    compare_model(ref_model, ref_json);
}

/* The facts about SmolLM2-135M-Instruct (its model card and config.json). */
static void test_smollm2(void **state) {
    (void)state;
    if (access(ref_model, R_OK) || getenv("TPD_MF_MODEL")) skip();
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, ref_model, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_LLAMA);
    assert_int_equal(m.hp.n_layers, 30);
    assert_int_equal(m.hp.dim, 576);
    assert_int_equal(m.hp.n_heads, 9);
    assert_int_equal(m.hp.n_kv_heads, 3);
    assert_int_equal(m.hp.head_dim, 64);
    assert_int_equal(m.hp.ffn_dim, 1536);
    assert_int_equal(m.hp.vocab_size, 49152);
    assert_int_equal(m.hp.tied_embeddings, 1);
    assert_int_equal(m.hp.rope_neox, 0);
    assert_int_equal(modelfile_find(&m, "token_embd.weight")->type, DT_Q8_0);
    assert_int_equal(modelfile_find(&m, "blk.0.attn_q.weight")->type, DT_Q4_1);
    assert_int_equal(modelfile_find(&m, "blk.29.ffn_down.weight")->ne[0], 1536);
    assert_int_equal(m.n_tensors, 2 + 30 * 9);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    assert_int_equal(gguf_get_arr(m.gguf, "tokenizer.ggml.tokens", &et, &n, &data), 0);
    assert_int_equal(n, 49152);
    modelfile_close(&m);
}

int main(void) {
    static char file[4096], json[4096];
    tu_source_path(file, sizeof file, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    tu_source_path(json, sizeof json, "tests/data/smollm2_q4_1.json");
    ref_model = getenv("TPD_MF_MODEL") ? getenv("TPD_MF_MODEL") : file;
    ref_json = getenv("TPD_MF_EXPECT") ? getenv("TPD_MF_EXPECT") : json;
    const struct CMUnitTest only_compare[] = {cmocka_unit_test(test_compare_reference)};
    if (getenv("TPD_MF_MODEL")) return cmocka_run_group_tests(only_compare, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_llama),        cmocka_unit_test(test_gguf_qwen),
        cmocka_unit_test(test_gguf_bad_models),   cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_compare_reference),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
