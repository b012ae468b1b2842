/* Logging: a line is never cut, however long its message (the effective configuration is
 * several KB), and keeps its time, rank, level and source location. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/log.h"

/* What LOG writes to stderr while f runs. */
static char *capture_stderr(void (*f)(size_t), size_t arg) {
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    assert_true(dup2(fileno(tmp), 2) >= 0);
    f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fseek(tmp, 0, SEEK_END);
    long n = ftell(tmp);
    rewind(tmp);
    char *out = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(out, 1, (size_t)n, tmp), (size_t)n);
    fclose(tmp);
    return out;
}

static void log_long(size_t len) {
    char *msg = malloc(len + 1);
    for (size_t i = 0; i < len; i++) msg[i] = (char)('a' + i % 26);
    msg[len] = 0;
    memcpy(msg + len - 16, "all_ranks = false", 16); /* the end the old 1 KB buffer cut */
    LOG(LOG_INFO, "effective configuration:\n%s", msg);
    free(msg);
}

static void test_long_line_whole(void **state) {
    (void)state;
    log_init(0, LOG_INFO, 0);
    for (size_t len = 100; len <= 20000; len *= 10) {
        char *out = capture_stderr(log_long, len);
        assert_non_null(strstr(out, " [r0] INFO  effective configuration:\n"));
        assert_non_null(strstr(out, "all_ranks = fals (test_log.c:"));
        assert_true(strlen(out) > len);
        free(out);
    }
}

static void log_below_level(size_t unused) {
    (void)unused;
    LOG(LOG_DEBUG, "not shown");
    LOG(LOG_WARN, "shown %d", 7);
}

static void test_levels(void **state) {
    (void)state;
    log_init(0, LOG_INFO, 0);
    char *out = capture_stderr(log_below_level, 0);
    assert_null(strstr(out, "not shown"));
    assert_non_null(strstr(out, "WARN  shown 7 (test_log.c:"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_line_whole),
        cmocka_unit_test(test_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
