// link: tpd_model
/* hfconfig: the rotary settings in both config.json layouts. The config.json files that
 * transformers 5 wrote with save_pretrained (tests/data/hfconfig/, made by
 * tests/reference/make_hfconfig_fixtures.py, which records transformers' own rope_theta and
 * inverse frequencies beside each) must give the base and llama3 scaling that transformers
 * used; the long-standing top-level rope_theta / rope_scaling keep working; contradictory or
 * malformed rotary settings are refused with a message naming the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hfconfig.h"
#include "testutil.h"
#include "util/err.h"

#define HEAD \
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2," \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128," \
    "\"vocab_size\":300,\"max_position_embeddings\":2048,\"rms_norm_eps\":1e-5"

static int parse(const char *json, struct model_hparams *hp, char *err) {
    return hfconfig_parse(hp, json, strlen(json), "config.json", err);
}

static void expect_error(const char *json, const char *needle) {
    struct model_hparams hp;
    char err[ERR_LEN] = "";
    assert_int_equal(parse(json, &hp, err), -1);
    if (!strstr(err, needle)) fail_msg("error \"%s\" does not name \"%s\"", err, needle);
}

static void test_top_level_layout(void **state) {
    (void)state;
    struct model_hparams hp;
    char err[ERR_LEN] = "";
    assert_int_equal(parse(HEAD "}", &hp, err), 0);
    assert_true(hp.rope_theta == 10000.0f); /* the default */
    assert_int_equal(hp.rope_scaling_llama3, 0);
    assert_int_equal(
        parse(HEAD
              ",\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
              "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
              "\"original_max_position_embeddings\":8192}}",
              &hp, err),
        0);
    assert_true(hp.rope_theta == 500000.0f);
    assert_int_equal(hp.rope_scaling_llama3, 1);
    assert_true(hp.rope_factor == 8.0f);
    assert_int_equal(hp.rope_orig_ctx, 8192);
    /* rope_scaling null or default: no scaling */
    assert_int_equal(parse(HEAD ",\"rope_scaling\":null}", &hp, err), 0);
    assert_int_equal(hp.rope_scaling_llama3, 0);
    assert_int_equal(parse(HEAD ",\"rope_scaling\":{\"type\":\"default\"}}", &hp, err), 0);
    assert_int_equal(hp.rope_scaling_llama3, 0);
}

static void test_rope_parameters_layout(void **state) {
    (void)state;
    struct model_hparams hp;
    char err[ERR_LEN] = "";
    assert_int_equal(
        parse(HEAD ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":50000.0}}", &hp,
              err),
        0);
    assert_true(hp.rope_theta == 50000.0f);
    assert_int_equal(hp.rope_scaling_llama3, 0);
    assert_int_equal(parse(HEAD ",\"rope_parameters\":{\"rope_theta\":1000000.0}}", &hp, err), 0);
    assert_true(hp.rope_theta == 1e6f);
    assert_int_equal(hp.rope_scaling_llama3, 0);
    assert_int_equal(parse(HEAD
                           ",\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,"
                           "\"factor\":32.0,\"low_freq_factor\":2.0,\"high_freq_factor\":8.0,"
                           "\"original_max_position_embeddings\":64}}",
                           &hp, err),
                     0);
    assert_true(hp.rope_theta == 500000.0f);
    assert_int_equal(hp.rope_scaling_llama3, 1);
    assert_true(hp.rope_factor == 32.0f);
    assert_true(hp.rope_low_freq_factor == 2.0f);
    assert_true(hp.rope_high_freq_factor == 8.0f);
    assert_int_equal(hp.rope_orig_ctx, 64);
    /* both layouts, agreeing (transformers 5 reading an old file keeps both) */
    assert_int_equal(
        parse(HEAD ",\"rope_theta\":500000.0,\"rope_parameters\":{\"rope_type\":\"default\","
                   "\"rope_theta\":500000.0}}",
              &hp, err),
        0);
    assert_true(hp.rope_theta == 500000.0f);
}

static void test_bad_rotary_settings(void **state) {
    (void)state;
    expect_error(HEAD ",\"rope_theta\":10000.0,\"rope_parameters\":{\"rope_theta\":500000.0}}",
                 "disagree");
    expect_error(HEAD ",\"rope_parameters\":[1,2]}", "\"rope_parameters\" must be an object");
    expect_error(HEAD ",\"rope_parameters\":{\"full_attention\":{\"rope_theta\":1e6},"
                      "\"sliding_attention\":{\"rope_theta\":1e4}}}",
                 "per-layer-type");
    expect_error(HEAD
                 ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":1e6,\"factor\":4.0}}",
                 "rope_parameters type 'yarn' is not supported");
    expect_error(HEAD ",\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":1e6}}",
                 "missing \"factor\"");
    expect_error(HEAD ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":\"big\"}}",
                 "\"rope_theta\" must be a number");
    expect_error(HEAD ",\"rope_scaling\":{\"factor\":2.0}}",
                 "\"rope_scaling\" has no string \"rope_type\"");
}

/* Each fixture: a config.json as transformers 5 saved it, and what transformers computed from
 * it (expect.json: rope_theta and the llama3 parameters its rotary embedding used, and its
 * inverse frequencies, which are recomputed here from what tpd read). */
static void check_fixture(const char *name) {
    char rel[256];
    size_t n = 0, m = 0;
    snprintf(rel, sizeof rel, "tests/data/hfconfig/%s/config.json", name);
    char *cfg = tu_read_source(rel, &n);
    snprintf(rel, sizeof rel, "tests/data/hfconfig/%s/expect.json", name);
    char *exp = tu_read_source(rel, &m);
    struct model_hparams hp;
    char err[ERR_LEN] = "";
    if (hfconfig_parse(&hp, cfg, n, name, err)) fail_msg("%s", err);
    cJSON *e = cJSON_ParseWithLength(exp, m);
    assert_non_null(e);
    const double theta = cJSON_GetObjectItem(e, "rope_theta")->valuedouble;
    assert_true(fabs(hp.rope_theta - theta) <= 1e-6 * theta);
    const cJSON *sc = cJSON_GetObjectItem(e, "llama3");
    assert_int_equal(hp.rope_scaling_llama3, cJSON_IsObject(sc));
    /* inverse frequencies as transformers' default / llama3 rope init computed them */
    const cJSON *inv = cJSON_GetObjectItem(e, "inv_freq");
    const int half = cJSON_GetArraySize(inv), hd = 2 * half;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow(hp.rope_theta, 2.0 * i / hd);
        if (hp.rope_scaling_llama3) { /* transformers' _compute_llama3_parameters */
            const double lo_wl = hp.rope_orig_ctx / hp.rope_low_freq_factor;
            const double hi_wl = hp.rope_orig_ctx / hp.rope_high_freq_factor;
            const double wl = 2 * M_PI / f;
            if (wl > lo_wl) {
                f /= hp.rope_factor;
            } else if (wl >= hi_wl) {
                const double s = (hp.rope_orig_ctx / wl - hp.rope_low_freq_factor) /
                                 (hp.rope_high_freq_factor - hp.rope_low_freq_factor);
                f = (1 - s) * f / hp.rope_factor + s * f;
            }
        }
        const double want = cJSON_GetArrayItem(inv, i)->valuedouble;
        if (fabs(f - want) > 1e-5 * fabs(want))
            fail_msg("%s: inv_freq[%d] = %.9g from tpd's settings, transformers had %.9g", name, i,
                     f, want);
    }
    printf("%s: rope_theta %g, llama3 %d, %d frequencies match transformers\n", name,
           (double)hp.rope_theta, hp.rope_scaling_llama3, half);
    cJSON_Delete(e);
    free(cfg);
    free(exp);
}

static void test_transformers5_files(void **state) {
    (void)state;
    check_fixture("llama");
    check_fixture("llama3-rope-scaling");
    check_fixture("qwen2");
    check_fixture("qwen3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_level_layout),
        cmocka_unit_test(test_rope_parameters_layout),
        cmocka_unit_test(test_bad_rotary_settings),
        cmocka_unit_test(test_transformers5_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
