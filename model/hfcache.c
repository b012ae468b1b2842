#include "hfcache.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../util/err.h"
#include "../util/fatal.h"

#define PATH_LEN 4096

/* A path into out[PATH_LEN]; one cut short is emptied (and then names nothing). */
__attribute__((format(printf, 2, 3))) static void path_fmt(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_LEN, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_LEN) out[0] = 0;
}
/* org/name[@rev]: each part letters, digits, '.', '_', '-', not starting with '.'; a name
 * ending in .gguf, .safetensors or .json is a file path instead. */
static int id_shaped(const char *s, size_t *org_len, size_t *name_end) {
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || strchr(slash + 1, '/')) return 0;
    const char *at = strchr(slash + 1, '@');
    const char *end = at ? at : s + strlen(s);
    if (end == slash + 1 || (at && !at[1])) return 0;
    /* a model file's name ("models/x.gguf"): a path, missing or not, never a repository id */
    static const char *const exts[] = {".gguf", ".safetensors", ".json"};
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t n = strlen(exts[i]);
        if ((size_t)(end - slash - 1) > n && !strncasecmp(end - n, exts[i], n)) return 0;
    }
    for (const char *p = s; p < end; p++) {
        if (p == slash) continue;
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '.' || *p == '_' || *p == '-';
        if (!ok || ((p == s || p == slash + 1) && *p == '.')) return 0;
    }
    for (const char *p = at ? at + 1 : end; *p; p++)
        if (*p == '/' || (*p == '.' && p[1] == '.')) return 0; /* a ref name, never a path out */
    *org_len = (size_t)(slash - s);
    *name_end = (size_t)(end - s);
    return 1;
}

static void hub_dir(char *out, size_t len) {
    const char *v = getenv("HF_HUB_CACHE");
    if (v && v[0]) {
        snprintf(out, len, "%.4000s", v);
        return;
    }
    v = getenv("HF_HOME");
    if (v && v[0]) {
        snprintf(out, len, "%.4000s/hub", v);
        return;
    }
    v = getenv("HOME");
    snprintf(out, len, "%.4000s/.cache/huggingface/hub", v && v[0] ? v : ".");
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

/* The snapshot's one .gguf file when it has no config.json (a GGUF-only repository). */
static char *gguf_only(const char *dir) {
    char p[PATH_LEN];
    path_fmt(p, "%s/config.json", dir);
    struct stat st;
    if (!stat(p, &st)) return NULL;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf") && n++ == 0) {
            path_fmt(p, "%s/%s", dir, e->d_name);
            found = xstrdup(p);
        }
    }
    closedir(d);
    if (n != 1) {
        free(found);
        return NULL;
    }
    return found;
}

int hfcache_resolve(const char *model, char **out, char *err) {
    *out = NULL;
    struct stat st;
    size_t org_len, name_end;
    if (!model || !stat(model, &st) || !id_shaped(model, &org_len, &name_end)) return 0;
    char hub[PATH_LEN], repo[PATH_LEN], ref[PATH_LEN], snap[PATH_LEN];
    hub_dir(hub, sizeof hub);
    path_fmt(repo, "%s/models--%.*s--%.*s", hub, (int)org_len, model, (int)(name_end - org_len - 1),
             model + org_len + 1);
    const char *rev = model[name_end] == '@' ? model + name_end + 1 : "main";
    if (!is_dir(repo))
        return err_set(
            err,
            "model \"%s\" is neither a file nor in the local Hugging Face cache (no %s); tpd does "
            "not download: fetch it (huggingface-cli download %.*s) or give a path",
            model, repo, (int)name_end, model);
    /* a ref (branch or tag) names a commit; a commit names its snapshot directly */
    char commit[128] = "";
    path_fmt(ref, "%s/refs/%s", repo, rev);
    FILE *f = fopen(ref, "r");
    if (f) {
        if (!fgets(commit, sizeof commit, f)) commit[0] = 0;
        fclose(f);
        commit[strcspn(commit, "\r\n")] = 0;
    } else {
        snprintf(commit, sizeof commit, "%s", rev);
    }
    if (!commit[0] || strchr(commit, '/') || !strcmp(commit, "..") || !strcmp(commit, "."))
        return err_set(err, "model \"%s\": %s does not name a snapshot", model, ref);
    path_fmt(snap, "%s/snapshots/%s", repo, commit);
    if (!is_dir(snap))
        return err_set(
            err, "model \"%s\": revision \"%s\" is not in the local Hugging Face cache (no %s)",
            model, rev, snap);
    char *g = gguf_only(snap);
    *out = g ? g : xstrdup(snap);
    return 0;
}
