// link: tpd_parallel tpd_testutil_model
/* The tensor table (model/tensors.h): every row complete and its names unique; GGUF and HF
 * names parse back to their row and layer for every row, and the HF mapping agrees with the
 * names tests/testutil_model.c writes (spelled out there by hand); shape rules in terms of
 * SmolLM2's sizes; and the weight loader (parallel/model.c) reads every row: a tiny model
 * that needs all of them loads at tp 1 and 2 and pp 1 and 2, with the rank parts it reads
 * checked against the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/modelfile.h"
#include "model/tensors.h"
#include "parallel/model.h"
#include "testutil.h"
#include "testutil_model.h"
#include "util/err.h"

static int count(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p++) n++;
    return n;
}

static void test_rows_complete(void **state) {
    (void)state;
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const struct tensor_info *ti = tensor_info(id);
        assert_non_null(ti);
        assert_non_null(ti->gguf);
        int per_layer = ti->scope == TSCOPE_LAYER;
        /* a per-layer row names its layer once in each spelling, a model-wide row never */
        assert_int_equal(count(ti->gguf, "%"), per_layer);
        assert_int_equal(count(ti->gguf, "%d"), per_layer);
        /* an HF expert row also names its expert */
        int hf_slots = per_layer + (ti->ne2 == TDIM_EXPERTS);
        if (ti->hf) {
            assert_int_equal(count(ti->hf, "%"), hf_slots);
            assert_int_equal(count(ti->hf, "%d"), hf_slots);
        }
        if (ti->hf_alt) {
            assert_int_equal(count(ti->hf_alt, "%"), hf_slots);
            assert_int_equal(count(ti->hf_alt, "%d"), hf_slots);
        }
        /* matrices have two dimensions (a whole one may have one row), vectors one */
        assert_int_equal(tensor_is_matrix(id), ti->ne1 != TDIM_ONE || ti->role == TROLE_WHOLE);
        assert_true(ti->ne0 != TDIM_ONE);
        /* column- and row-parallel matrices, biases and norms belong to layers, except the
         * final norm */
        if (ti->role == TROLE_COLUMN || ti->role == TROLE_ROW || ti->role == TROLE_BIAS)
            assert_true(per_layer);
        if (ti->role == TROLE_EMBEDDING) assert_int_equal(ti->scope, TSCOPE_FIRST);
        if (ti->role == TROLE_OUTPUT) assert_int_equal(ti->scope, TSCOPE_LAST);
    }
    assert_null(tensor_info(TENSOR_COUNT));
    assert_null(tensor_info(-1));
}

static void test_names_unique(void **state) {
    (void)state;
    for (int a = 0; a < TENSOR_COUNT; a++)
        for (int b = a + 1; b < TENSOR_COUNT; b++) {
            const struct tensor_info *x = tensor_info(a), *y = tensor_info(b);
            if (!strcmp(x->gguf, y->gguf)) fail_msg("rows %d and %d: GGUF %s", a, b, x->gguf);
            if (x->hf && y->hf && !strcmp(x->hf, y->hf))
                fail_msg("rows %d and %d: HF %s", a, b, x->hf);
        }
}

/* Every row's names for these layers parse back to it, and HF names map to GGUF names. */
static void test_names_round_trip(void **state) {
    (void)state;
    static const int layers[] = {0, 1, 9, 10, 79, 123, 9999999};
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const struct tensor_info *ti = tensor_info(id);
        int n_layers = ti->scope == TSCOPE_LAYER ? (int)(sizeof layers / sizeof *layers) : 1;
        for (int k = 0; k < n_layers; k++) {
            int want = ti->scope == TSCOPE_LAYER ? layers[k] : -1, layer = -2;
            char g[96], h[96], mapped[96];
            assert_int_equal(tensor_name(id, want, TNAMES_GGUF, g, sizeof g), 0);
            assert_int_equal(tensor_parse(g, TNAMES_GGUF, &layer), id);
            assert_int_equal(layer, want);
            if (!ti->hf) {
                assert_int_equal(tensor_name(id, want, TNAMES_HF, h, sizeof h), -1);
                continue;
            }
            if (ti->ne2 == TDIM_EXPERTS) { /* HF: one tensor per expert, in either spelling */
                int expert = -2;
                assert_int_equal(tensor_name(id, want, TNAMES_HF, h, sizeof h), -1);
                assert_int_equal(tensor_expert_name(id, want, 77, TNAMES_HF, h, sizeof h), 0);
                assert_int_equal(tensor_parse(h, TNAMES_HF, &layer), id);
                assert_int_equal(layer, want);
                assert_int_equal(tensor_hf_to_gguf(h, mapped, sizeof mapped), 1);
                assert_int_equal(tensor_expert_name(id, want, 77, TNAMES_GGUF, g, sizeof g), 0);
                assert_string_equal(mapped, g);
                assert_int_equal(tensor_parse(g, TNAMES_GGUF, &layer), id); /* a piece's row */
                assert_int_equal(layer, want);
                (void)expert;
                continue;
            }
            assert_int_equal(tensor_name(id, want, TNAMES_HF, h, sizeof h), 0);
            assert_int_equal(tensor_parse(h, TNAMES_HF, &layer), id);
            assert_int_equal(layer, want);
            assert_int_equal(tensor_hf_to_gguf(h, mapped, sizeof mapped), 1);
            assert_string_equal(mapped, g);
            /* the two spellings never cross */
            assert_int_equal(tensor_parse(g, TNAMES_HF, &layer), -1);
            assert_int_equal(tensor_parse(h, TNAMES_GGUF, &layer), -1);
        }
    }
    char g[96];
    assert_int_equal(tensor_name(TENSOR_ATTN_Q, 3, TNAMES_GGUF, g, sizeof g), 0);
    assert_string_equal(g, "blk.3.attn_q.weight");
    assert_int_equal(tensor_name(TENSOR_ATTN_Q, 3, TNAMES_GGUF, g, 19), -1); /* too short */
    int layer;
    static const char *const not_ours[] = {
        "model.layers.0.self_attn.rotary_emb.inv_freq",
        "model.layers.x.mlp.up_proj.weight",
        "model.layers..mlp.up_proj.weight",
        "model.layers.12345678.mlp.up_proj.weight",
        "model.layers.1.mlp.up_proj.weightx",
        "model.layers.1.mlp.up_proj",
        "lm_head",
        "model.embed_tokens.weight.1",
        "",
        "blk.0.attn_q.weight",
    };
    for (size_t i = 0; i < sizeof not_ours / sizeof *not_ours; i++) {
        assert_int_equal(tensor_parse(not_ours[i], TNAMES_HF, &layer), -1);
        assert_int_equal(tensor_hf_to_gguf(not_ours[i], g, sizeof g), 0);
    }
}

/* The names tests/testutil_model.c spells out by hand for a model with every tensor map
 * the same way. */
static void test_names_match_testutil(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    s.tied = 0;
    s.bias = s.qknorm = s.rope_freqs = 1;
    struct tm_tensor t[128];
    int nt, seen[TENSOR_COUNT] = {0};
    tm_write_gguf(&s, "all.gguf", t, &nt);
    for (int i = 0; i < nt; i++) {
        int layer, id = tensor_parse(t[i].gguf, TNAMES_GGUF, &layer);
        assert_true(id >= 0);
        seen[id] = 1;
        char g[96];
        if (!strcmp(t[i].hf, "-")) { /* no HF spelling */
            assert_null(tensor_info(id)->hf);
            continue;
        }
        assert_int_equal(tensor_hf_to_gguf(t[i].hf, g, sizeof g), 1);
        assert_string_equal(g, t[i].gguf);
    }
    /* mixture-of-experts rows: the Python fixtures write them (tests/py/test_moe.py) */
    for (int id = 0; id < TENSOR_COUNT; id++)
        if (!seen[id] && tensor_info(id)->need != TNEED_MOE && tensor_info(id)->need != TNEED_SHEXP)
            fail_msg("testutil_model writes no %s", tensor_info(id)->gguf);
}

/* SmolLM2-135M's sizes, and every row's shape written out by hand. */
static void test_shapes(void **state) {
    (void)state;
    struct model_hparams hp = {.dim = 576,
                               .n_heads = 9,
                               .n_kv_heads = 3,
                               .head_dim = 64,
                               .ffn_dim = 1536,
                               .vocab_size = 49152,
                               .n_experts = 60,
                               .expert_ffn_dim = 1408,
                               .shexp_ffn_dim = 5632};
    static const struct {
        enum tensor_id id;
        int64_t ne0, ne1;
    } want[] = {
        {TENSOR_TOKEN_EMBD, 576, 49152},     {TENSOR_OUTPUT_NORM, 576, 1},
        {TENSOR_OUTPUT, 576, 49152},         {TENSOR_ROPE_FREQS, 32, 1},
        {TENSOR_ATTN_NORM, 576, 1},          {TENSOR_ATTN_Q, 576, 576},
        {TENSOR_ATTN_K, 576, 192},           {TENSOR_ATTN_V, 576, 192},
        {TENSOR_ATTN_OUTPUT, 576, 576},      {TENSOR_FFN_NORM, 576, 1},
        {TENSOR_FFN_GATE, 576, 1536},        {TENSOR_FFN_UP, 576, 1536},
        {TENSOR_FFN_DOWN, 1536, 576},        {TENSOR_ATTN_Q_BIAS, 576, 1},
        {TENSOR_ATTN_K_BIAS, 192, 1},        {TENSOR_ATTN_V_BIAS, 192, 1},
        {TENSOR_ATTN_Q_NORM, 64, 1},         {TENSOR_ATTN_K_NORM, 64, 1},
        {TENSOR_FFN_GATE_INP, 576, 60},      {TENSOR_FFN_GATE_EXPS, 576, 1408},
        {TENSOR_FFN_UP_EXPS, 576, 1408},     {TENSOR_FFN_DOWN_EXPS, 1408, 576},
        {TENSOR_FFN_GATE_INP_SHEXP, 576, 1}, {TENSOR_FFN_GATE_SHEXP, 576, 5632},
        {TENSOR_FFN_UP_SHEXP, 576, 5632},    {TENSOR_FFN_DOWN_SHEXP, 5632, 576},
    };
    assert_int_equal(sizeof want / sizeof *want, TENSOR_COUNT);
    for (int i = 0; i < TENSOR_COUNT; i++) {
        const struct tensor_info *ti = tensor_info(want[i].id);
        assert_int_equal(tensor_dim_size(&hp, ti->ne0), want[i].ne0);
        assert_int_equal(tensor_dim_size(&hp, ti->ne1), want[i].ne1);
    }
    /* hp.dim differs from n_heads * head_dim (Qwen3): Wo's inputs follow the heads */
    hp.head_dim = 128;
    assert_int_equal(tensor_dim_size(&hp, tensor_info(TENSOR_ATTN_OUTPUT)->ne0), 9 * 128);
    assert_int_equal(tensor_dim_size(&hp, tensor_info(TENSOR_ATTN_OUTPUT)->ne1), 576);
}

static void test_needs_and_types(void **state) {
    (void)state;
    struct model_hparams hp = {.tied_embeddings = 1};
    assert_true(tensor_needed(&hp, TENSOR_ATTN_Q, 0, 0));
    assert_false(tensor_needed(&hp, TENSOR_OUTPUT, 0, 1));
    assert_false(tensor_needed(&hp, TENSOR_ATTN_Q_BIAS, 0, 1));
    assert_false(tensor_needed(&hp, TENSOR_ATTN_K_NORM, 0, 1));
    assert_false(tensor_needed(&hp, TENSOR_ROPE_FREQS, 0, 0));
    assert_true(tensor_needed(&hp, TENSOR_ROPE_FREQS, 0, 1));
    hp = (struct model_hparams){.qkv_bias = 1, .qk_norm = 1};
    assert_true(tensor_needed(&hp, TENSOR_OUTPUT, 0, 0));
    assert_true(tensor_needed(&hp, TENSOR_ATTN_V_BIAS, 0, 0));
    assert_true(tensor_needed(&hp, TENSOR_ATTN_Q_NORM, 0, 0));
    /* mixture of experts: layer 1 dense (mlp_only_layers), every second layer sparse
     * (decoder_sparse_step 2), the shared expert only with a size */
    hp = (struct model_hparams){.n_experts = 8, .n_experts_used = 2, .moe_step = 2};
    hp.moe_dense[0] = 1u << 3;
    static const int sparse[] = {0, 1, 0, 0, 0, 1};
    for (int l = 0; l < 6; l++) {
        assert_int_equal(hparams_layer_moe(&hp, l), sparse[l]);
        assert_int_equal(tensor_needed(&hp, TENSOR_FFN_GATE_EXPS, l, 0), sparse[l]);
        assert_int_equal(tensor_needed(&hp, TENSOR_FFN_GATE_INP, l, 0), sparse[l]);
        assert_int_equal(tensor_needed(&hp, TENSOR_FFN_DOWN, l, 0), !sparse[l]);
        assert_false(tensor_needed(&hp, TENSOR_FFN_UP_SHEXP, l, 0));
    }
    hp.shexp_ffn_dim = 64;
    assert_true(tensor_needed(&hp, TENSOR_FFN_UP_SHEXP, 1, 0));
    assert_false(tensor_needed(&hp, TENSOR_FFN_UP_SHEXP, 2, 0));
    assert_true(tensor_type_ok(TENSOR_FFN_DOWN, DT_Q6_K));
    assert_true(tensor_type_ok(TENSOR_ATTN_NORM, DT_BF16));
    assert_false(tensor_type_ok(TENSOR_ATTN_NORM, DT_Q8_0));
    assert_false(tensor_type_ok(TENSOR_ROPE_FREQS, DT_F16));
    assert_string_equal(tensor_types(TENSOR_ROPE_FREQS), "F32");
}

/* The rank's part of the file's tensor id of layer il at element offset off, n elements of
 * es bytes, equals what the loader put at dev. */
static void expect_part(struct backend *be, const struct model_file *mf, enum tensor_id id, int il,
                        const void *dev, int64_t off, int64_t n, int es) {
    const struct mf_tensor *t = modelfile_tensor(mf, id, il);
    assert_non_null(t);
    char err[ERR_LEN], *want = malloc((size_t)(n * es)), *got = malloc((size_t)(n * es));
    if (modelfile_read(mf, t, (uint64_t)(off * es), (uint64_t)(n * es), want, err))
        fail_msg("%s", err);
    be->download(be->ctx, got, dev, (size_t)(n * es));
    assert_memory_equal(got, want, (size_t)(n * es));
    free(want);
    free(got);
}

/* A model that needs every row loads at each tp and pp split (parallel/model.c refuses a
 * load that leaves out a needed row of the table), and the parts read are this rank's. */
static void test_loader_reads_every_row(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    s.tied = 0;
    s.bias = s.qknorm = s.rope_freqs = 1;
    s.layers = 3;
    s.mat_type = s.emb_type = DT_F16; /* 2-byte elements: the checks below read plain ranges */
    struct tm_tensor t[128];
    int nt;
    const char *path = tm_write_gguf(&s, "every_row.gguf", t, &nt);
    char err[ERR_LEN] = "";
    struct model_file mf;
    if (modelfile_open(&mf, path, err)) fail_msg("%s", err);
    for (int id = 0; id < TENSOR_COUNT; id++) /* a dense model: the experts' rows aside */
        if (!tensor_needed(&mf.hp, id, 0, modelfile_tensor(&mf, id, 0) != NULL) &&
            tensor_info(id)->need != TNEED_MOE && tensor_info(id)->need != TNEED_SHEXP)
            fail_msg("the test model does not need %s", tensor_info(id)->gguf);
    struct backend be;
    if (backend_open(&be, "cpu", 1, 0, NULL, err)) fail_msg("%s", err);
    static const int split[][4] = {{1, 0, 1, 0}, {2, 1, 1, 0}, {1, 0, 2, 0}, {2, 0, 2, 1}};
    for (size_t c = 0; c < sizeof split / sizeof *split; c++) {
        int tp = split[c][0], rank = split[c][1], pp = split[c][2], stage = split[c][3];
        struct model m;
        if (model_load(&m, path, &be, tp, rank, pp, stage, MOE_SPLIT_AUTO, NULL, err))
            fail_msg("tp %d rank %d pp %d stage %d: %s", tp, rank, pp, stage, err);
        const struct shard_plan *sp = &m.sp;
        const int hd = s.head_dim, il = sp->layer0;
        const struct layer_weights *lw = &m.layers[0];
        assert_non_null(m.inv_freq);
        assert_true(lw->qkv_fused && lw->gate_up_fused);
        assert_int_equal(lw->qkv[0].rows, (sp->n_q + 2 * sp->n_kv) * hd);
        expect_part(&be, &mf, TENSOR_ATTN_Q_BIAS, il, lw->qkv_bias, sp->q_head0 * hd, sp->n_q * hd,
                    4);
        expect_part(&be, &mf, TENSOR_ATTN_V_BIAS, il, lw->qkv_bias + (sp->n_q + sp->n_kv) * hd,
                    sp->kv_head0 * hd, sp->n_kv * hd, 4);
        expect_part(&be, &mf, TENSOR_ATTN_K_NORM, il, lw->k_norm, 0, hd, 4);
        const int64_t dim = s.dim;
        expect_part(&be, &mf, TENSOR_ATTN_K, il, (char *)lw->qkv[0].data + sp->n_q * hd * dim * 2,
                    sp->kv_head0 * hd * dim, sp->n_kv * hd * dim, 2);
        /* Wo's first row: the rank's columns */
        expect_part(&be, &mf, TENSOR_ATTN_OUTPUT, il, lw->wo.data, sp->wo_col0, sp->wo_ncols, 2);
        assert_int_equal(lw->down.cols, sp->n_ffn);
        if (sp->first)
            expect_part(&be, &mf, TENSOR_TOKEN_EMBD, -1, m.tok_embd.data, sp->vocab0 * dim,
                        sp->n_vocab * dim, 2);
        if (sp->last) {
            assert_ptr_not_equal(m.output.data, m.tok_embd.data);
            expect_part(&be, &mf, TENSOR_OUTPUT, -1, m.output.data, sp->vocab0 * dim,
                        sp->n_vocab * dim, 2);
            expect_part(&be, &mf, TENSOR_OUTPUT_NORM, -1, m.output_norm, 0, dim, 4);
        }
        model_free(&m);
    }
    modelfile_close(&mf);
    backend_close(&be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_complete),
        cmocka_unit_test(test_names_unique),
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_names_match_testutil),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_needs_and_types),
        cmocka_unit_test(test_loader_reads_every_row),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
