// link: tpd_daemon
/* Config loading: defaults, TOML file, flags overriding the file, and errors that name
 * file, line and key; every example in configs/ loads. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/config.h"

static int apply(struct config *c, const char *text, char *err) {
    return config_apply_toml(c, text, strlen(text), "t.toml", err);
}

static void test_file_then_flags(void **state) {
    (void)state;
    struct config c;
    char err[512];
    config_defaults(&c);
    assert_int_equal(c.block_size, 16);
    assert_int_equal(apply(&c,
                           "[model]\npath = \"m.gguf\"\n[server]\nsocket = "
                           "\"/tmp/a.sock\"\nsocket_mode = \"0660\"\n"
                           "allowed_uids = [0, 1000]\n[scheduler]\nmax_running = 8\n",
                           err),
                     0);
    assert_string_equal(c.model_path, "m.gguf");
    assert_int_equal(c.socket_mode, 0660);
    assert_int_equal(c.n_allowed_uids, 2);
    assert_int_equal(c.allowed_uids[1], 1000);
    char *argv[] = {"--socket", "/tmp/b.sock", "--scheduler.max_running", "4", "--threads", "3"};
    assert_int_equal(config_apply_args(&c, 6, argv, err), 0);
    assert_string_equal(c.socket, "/tmp/b.sock");
    assert_int_equal(c.max_running, 4);
    assert_int_equal(c.threads, 3);
    assert_int_equal(config_validate(&c, err), 0);
    char *v = config_get(&c, "server.socket");
    assert_string_equal(v, "/tmp/b.sock");
    free(v);
    v = config_get(&c, "scheduler.max_running");
    assert_string_equal(v, "4");
    free(v);
    char *dump = config_dump(&c);
    assert_non_null(strstr(dump, "[scheduler]\nmax_running = 4\n"));
    free(dump);
    config_free(&c);
}

static void expect_error(const char *text, const char *needle) {
    struct config c;
    char err[512] = "";
    config_defaults(&c);
    assert_int_equal(apply(&c, text, err), -1);
    if (!strstr(err, needle)) fail_msg("error '%s' lacks '%s'", err, needle);
    config_free(&c);
}

static void test_errors_name_file_line_key(void **state) {
    (void)state;
    expect_error("[server]\n\nport = 5\n", "t.toml:3: unknown key 'port' in [server]");
    expect_error("[nonsense]\nx = 1\n", "unknown section [nonsense]");
    expect_error("[scheduler]\nmax_running = \"many\"\n",
                 "t.toml:2: scheduler.max_running must be an integer");
    expect_error("[scheduler]\nmax_running = 0\n", "scheduler.max_running = 0 is out of range");
    expect_error("[cache]\nblock_size = 1e9\n", "cache.block_size must be an integer");
    expect_error("[server]\nsocket_mode = \"0999\"\n", "socket_mode must be an octal mode");
    expect_error("[server]\nallowed_uids = [\"root\"]\n", "allowed_uids[0]");
    expect_error("[model]\npath = 1\n", "t.toml:2: model.path must be a string");
    expect_error("[model]\npath = \"a\"\npath = \"b\"\n", "t.toml:3:"); /* TOML duplicate key */
    expect_error("model = 3\n", "must be a section");
}

static void test_flag_and_validate_errors(void **state) {
    (void)state;
    struct config c;
    char err[512];
    config_defaults(&c);
    char *a1[] = {"--threads", "-1"};
    assert_int_equal(config_apply_args(&c, 2, a1, err), -1);
    assert_non_null(strstr(err, "--threads"));
    char *a2[] = {"--bogus", "1"};
    assert_int_equal(config_apply_args(&c, 2, a2, err), -1);
    assert_non_null(strstr(err, "--bogus"));
    char *a3[] = {"--model"};
    assert_int_equal(config_apply_args(&c, 1, a3, err), -1);
    assert_int_equal(config_validate(&c, err), -1); /* no model */
    assert_non_null(strstr(err, "--model"));
    char *a4[] = {"--model", "m", "--kv-type", "q4", "--max-running", "64", "--step-tokens", "32"};
    assert_int_equal(config_apply_args(&c, 4, a4, err), 0);
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "cache.type"));
    assert_int_equal(config_apply_args(&c, 4, a4 + 4, err), 0);
    free(c.kv_type);
    c.kv_type = strdup("f32");
    assert_int_equal(config_validate(&c, err), -1);
    assert_non_null(strstr(err, "step_tokens"));
    config_free(&c);
}

static void test_examples_load(void **state) {
    (void)state;
    const char *src = getenv("TPD_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/configs", src ? src : ".");
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".toml")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static char buf[65536];
        size_t got = fread(buf, 1, sizeof buf, f);
        fclose(f);
        struct config c;
        char err[512];
        config_defaults(&c);
        if (config_apply_toml(&c, buf, got, path, err) || config_validate(&c, err))
            fail_msg("%s", err);
        assert_true(c.tp >= 1);
        config_free(&c);
        n++;
    }
    closedir(d);
    assert_true(n >= 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_then_flags),
        cmocka_unit_test(test_errors_name_file_line_key),
        cmocka_unit_test(test_flag_and_validate_errors),
        cmocka_unit_test(test_examples_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
