// link: tpd_testutil_model
/* modelfile tests on Hugging Face directories: tiny Llama/Mistral/Qwen2/Qwen3 models
 * written here (tests/testutil_model.h) as config.json + safetensors, single file and
 * sharded with an index, must open with the right hyperparameters (rope scaling, tied
 * embeddings, config defaults), GGUF tensor names, shapes in ne order and readable data;
 * broken variants (unsupported dtypes, misshapen or missing tensors, bad configs, missing
 * or escaping shards) must be refused with messages naming the tensor or field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/modelfile.h"
#include "testutil.h"
#include "testutil_model.h"
#include "util/err.h"

static void test_hf_llama(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    struct tm_hf o = tm_default_hf();
    struct tm_tensor t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *dir = tm_write_hf(&s, &o, "llama", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    const struct model_hparams *hp = &m.hp;
    tm_check_default_shape(hp);
    assert_int_equal(hp->max_ctx, 2048);
    assert_true(hp->norm_eps == 1e-6f);
    assert_true(hp->rope_theta == 1e6f);
    assert_int_equal(hp->rope_neox, 1);
    assert_int_equal(hp->bos_id, 5);
    assert_int_equal(hp->eos_id, 7);
    assert_null(m.gguf);
    assert_string_equal(m.hf_dir, dir);
    tm_check_tensors(&m, t, nt); /* also: inv_freq and position_ids were not taken */
    const struct mf_tensor *q = modelfile_find(&m, "blk.0.attn_q.weight");
    assert_string_equal(q->src_name, "model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(q->n_dims, 2);
    modelfile_close(&m);

    /* Untied with lm_head, F32, llama3 rope scaling, Mistral name. */
    o.arch_hf = "MistralForCausalLM";
    o.lm_head = 1;
    o.tie_config = 0;
    o.dtype = "F32";
    o.config_extra = ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                     "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                     "\"original_max_position_embeddings\":8192}";
    dir = tm_write_hf(&s, &o, "mistral", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.tied_embeddings, 0);
    assert_int_equal(m.hp.rope_scaling_llama3, 1);
    assert_true(m.hp.rope_factor == 8.0f);
    assert_true(m.hp.rope_low_freq_factor == 1.0f);
    assert_true(m.hp.rope_high_freq_factor == 4.0f);
    assert_int_equal(m.hp.rope_orig_ctx, 8192);
    assert_int_equal(modelfile_find(&m, "output.weight")->type, DT_F32);
    tm_check_tensors(&m, t, nt);
    modelfile_close(&m);

    /* tie_word_embeddings false but no lm_head: tied anyway. */
    o = tm_default_hf();
    o.tie_config = 0;
    dir = tm_write_hf(&s, &o, "untied", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.tied_embeddings, 1);
    modelfile_close(&m);
}

static void test_hf_qwen_sharded(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    s.bias = 1;
    struct tm_hf o = tm_default_hf();
    o.arch_hf = "Qwen2ForCausalLM";
    o.shards = 2;
    o.lm_head = 1;
    o.tie_config = 0;
    o.dtype = "F16";
    struct tm_tensor t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *dir = tm_write_hf(&s, &o, "qwen2", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN2);
    assert_int_equal(m.hp.qkv_bias, 1);
    assert_int_equal(m.n_files, 2);
    tm_check_tensors(&m, t, nt);
    /* Tensors alternate between the shards. */
    assert_int_equal(modelfile_find(&m, t[0].gguf)->file, 0);
    assert_int_equal(modelfile_find(&m, t[1].gguf)->file, 1);
    assert_non_null(strstr(m.paths[modelfile_find(&m, t[1].gguf)->file], "model-00002-of-00002"));
    modelfile_close(&m);

    /* Qwen3 with q/k norms and a head_dim that differs from hidden / heads. */
    s = tm_default_spec();
    s.head_dim = 32;
    s.qknorm = 1;
    o = tm_default_hf();
    o.arch_hf = "Qwen3ForCausalLM";
    dir = tm_write_hf(&s, &o, "qwen3", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN3);
    assert_int_equal(m.hp.head_dim, 32);
    assert_int_equal(m.hp.qk_norm, 1);
    tm_check_tensors(&m, t, nt);
    modelfile_close(&m);

    s = tm_default_spec();
    o = tm_default_hf();
    o.shards = 2;
    o.missing_shard = 1;
    tm_expect_open_fails(tm_write_hf(&s, &o, "noshard", t, &nt),
                         "shard 'model-00002-of-00002.safetensors' listed in "
                         "model.safetensors.index.json: No such file");
    o.missing_shard = 0;
    o.index_bad_name = 1;
    tm_expect_open_fails(tm_write_hf(&s, &o, "escape", t, &nt),
                         "must name a file in the model directory");
    o.index_bad_name = 0;
    o.index_ghost = 1;
    tm_expect_open_fails(
        tm_write_hf(&s, &o, "ghost", t, &nt),
        "tensor 'model.layers.0.mlp.ghost.weight' listed in the index is not in this shard");
}

static void test_hf_bad(void **state) {
    (void)state;
    struct tm_spec s = tm_default_spec();
    struct tm_tensor t[128];
    int nt;
    struct tm_hf o = tm_default_hf();

    o.bad_hf = "model.layers.1.mlp.up_proj.weight";
    o.bad_dtype = "I64";
    tm_expect_open_fails(tm_write_hf(&s, &o, "i64", t, &nt),
                         "tensor 'model.layers.1.mlp.up_proj.weight': dtype I64 is not supported");
    o = tm_default_hf();

    struct tm_spec bad = s;
    bad.alter = "blk.0.attn_v.weight";
    bad.alter_type = 0xffffffffu;
    bad.alter_ne1 = 48;
    tm_expect_open_fails(tm_write_hf(&bad, &o, "shape", t, &nt),
                         "tensor 'model.layers.0.self_attn.v_proj.weight': expected shape [64, 32] "
                         "(ne order), found [64, 48]");
    bad = s;
    bad.drop = "blk.1.attn_output.weight";
    tm_expect_open_fails(tm_write_hf(&bad, &o, "drop", t, &nt),
                         "missing tensor 'blk.1.attn_output.weight'");

    static const struct {
        const char *extra, *text, *msg;
    } cfg[] = {
        {",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}", NULL,
         "rope_scaling type 'yarn' is not supported"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,"
         "\"high_freq_factor\":1.0}",
         NULL, "llama3 rope scaling (factor 8, low 4, high 1"},
        {",\"rope_scaling\":[1]", NULL, "\"rope_scaling\" must be an object (found array)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2}",
         "missing \"hidden_size\""},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":\"64\"}",
         "\"hidden_size\" must be an integer (found string)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64.5}",
         "\"hidden_size\" = 64.5 is not an integer"},
        {NULL, "{\"architectures\":[\"GPT2LMHeadModel\"]}",
         "unsupported architecture 'GPT2LMHeadModel'"},
        {NULL, "{\"hidden_size\":64}", "missing \"architectures\""},
        {NULL, "[1,2]", "config.json: not a JSON object"},
        {NULL, "{\"architectures\":", "config.json: not valid JSON"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"intermediate_size\":96,\"vocab_"
         "size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}",
         "n_heads 4 is not divisible by n_kv_heads 3"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":0,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}",
         "n_heads = 0 is out of range"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":true}",
         "\"rms_norm_eps\" must be a number (found bool)"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"eos_token_id\":\"x\"}",
         "\"eos_token_id\" must be a non-negative integer"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":1}",
         "\"tie_word_embeddings\" must be true or false"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"bos_token_id\":500}",
         "bos/eos token id 500/-1 is outside the vocabulary (128)"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"head_dim\":15}",
         "head_dim 15 is odd"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":262144,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}",
         "dim = 262144 is out of range [1, 131072]"},
        {NULL,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
         "\"max_position_embeddings\":64,\"rms_norm_eps\":-1}",
         "rms norm epsilon -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        o = tm_default_hf();
        o.config_extra = cfg[i].extra;
        o.config_text = cfg[i].text;
        tm_expect_open_fails(tm_write_hf(&s, &o, "cfg", t, &nt), cfg[i].msg);
    }
    /* Defaults: no head_dim (null), no kv heads, no rope_theta, model_type instead of
     * architectures, eos absent. */
    o = tm_default_hf();
    o.config_text = "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"
                    "\"vocab_size\":128,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,"
                    "\"head_dim\":null,\"rope_scaling\":null,\"bos_token_id\":null}";
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, tm_write_hf(&s, &o, "defaults", t, &nt), err)) fail_msg("%s", err);
    assert_int_equal(m.hp.head_dim, 16);
    assert_true(m.hp.rope_theta == 10000.0f);
    assert_int_equal(m.hp.bos_id, -1);
    assert_int_equal(m.hp.eos_id, -1);
    assert_int_equal(m.hp.rope_scaling_llama3, 0);
    modelfile_close(&m);

    /* A directory without weights, and one without config.json. */
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/empty", tu_tmpdir);
    mkdir(dir, 0755);
    tm_expect_open_fails(dir, "config.json: cannot open");
    o = tm_default_hf();
    tm_write_hf(&s, &o, "noweights", t, &nt);
    snprintf(dir, sizeof dir, "%s/noweights", tu_tmpdir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    tm_expect_open_fails(dir, "no model.safetensors or model.safetensors.index.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_llama),
        cmocka_unit_test(test_hf_qwen_sharded),
        cmocka_unit_test(test_hf_bad),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
