/* A Hugging Face model id ("org/name", optionally "@revision") found in the local hub cache
 * the way huggingface_hub lays it out ($HF_HUB_CACHE, else $HF_HOME/hub, else
 * ~/.cache/huggingface/hub: models--org--name/refs/REV holds a commit, snapshots/COMMIT the
 * files). Nothing is downloaded. Any thread. */
#ifndef TPD_HFCACHE_H
#define TPD_HFCACHE_H

/* What --model names: 0 with *out NULL when it is a path that exists, or not shaped like a
 * model id (the loader then says what is wrong with it); 0 with *out (malloc'ed) the
 * snapshot directory, or its one .gguf file when it has no config.json; -1 with err when
 * it is an id the cache does not hold. */
int hfcache_resolve(const char *model, char **out, char *err);

#endif
