/* Tiny Llama / Qwen2 / Qwen3 models for the modelfile tests, written into tu_tmpdir as
 * GGUF files or as Hugging Face directories (config.json + safetensors, single file or
 * sharded), with knobs to break them (a tensor left out or misshapen, metadata missing or
 * mistyped, a bad config or index), and the checks a loaded model must pass. Tensor bytes
 * follow a per-tensor pattern so every read can be verified. Single-threaded test code. */
#ifndef TPD_TESTUTIL_MODEL_H
#define TPD_TESTUTIL_MODEL_H

#include <stdint.h>

struct model_file;
struct model_hparams;

/* The model (shared by both writers). */
struct tm_spec {
    const char *arch; /* GGUF arch or HF architectures[0] */
    int dim, heads, kv, head_dim, ffn, vocab, layers;
    int tied; /* leave out output.weight / lm_head.weight */
    int bias, qknorm, rope_freqs;
    uint32_t mat_type, emb_type, norm_type;
    const char *drop;  /* tensor (GGUF name) to leave out */
    const char *alter; /* tensor (GGUF name) to write with alter_type / alter_ne */
    uint32_t alter_type;
    int64_t alter_ne0, alter_ne1;
    const char *skip_key;   /* GGUF: metadata suffix to leave out */
    const char *string_key; /* GGUF: metadata suffix to write as a string */
    int meta_layers;        /* GGUF: block_count to claim instead of layers */
    float random_f32;       /* GGUF, > 0: F32 tensors hold seeded uniform values in
                             * [-random_f32, random_f32] (norms: 1), a model whose outputs
                             * spread, instead of the byte pattern */
};

struct tm_tensor {
    char gguf[64], hf[96];
    uint32_t type;
    int n_dims;
    int64_t ne0, ne1;
};

/* How a Hugging Face directory is written. */
struct tm_hf {
    const char *arch_hf;      /* architectures[0] */
    int lm_head;              /* write lm_head.weight */
    int tie_config;           /* "tie_word_embeddings": true */
    int shards;               /* 1: model.safetensors; 2: two shards + index */
    const char *dtype;        /* dtype string for every tensor */
    const char *config_extra; /* appended inside config.json's object */
    const char *config_text;  /* replaces config.json entirely */
    const char *bad_hf;       /* HF tensor written with dtype bad_dtype */
    const char *bad_dtype;
    int missing_shard, index_bad_name, index_ghost;
};

/* dim 64, 4 heads, 2 kv heads, head_dim 16, ffn 96, vocab 128, 2 layers, tied; Q4_1
 * matrices, Q8_0 embeddings, F32 norms. */
struct tm_spec tm_default_spec(void);
/* LlamaForCausalLM, tied in config.json, one BF16 model.safetensors. */
struct tm_hf tm_default_hf(void);

/* The default shape with F32 tensors of seeded random values (norms 1): a model whose
 * greedy outputs spread, for scheduler tests on a fast engine. Written as tu_tmpdir/fname;
 * returns the path (as tm_write_gguf). */
const char *tm_write_random_gguf(const char *fname);
/* Writes tu_tmpdir/fname as GGUF v3; fills t[0..*nt) (128 entries are enough) with the
 * tensors written. Returns the path (a static buffer, overwritten by the next call). */
const char *tm_write_gguf(const struct tm_spec *s, const char *fname, struct tm_tensor *t, int *nt);
/* Writes the directory tu_tmpdir/name (replacing it); t and *nt as for tm_write_gguf,
 * with every type set to o->dtype's. Returns the directory (a static buffer). */
const char *tm_write_hf(const struct tm_spec *s, const struct tm_hf *o, const char *name,
                        struct tm_tensor *t, int *nt);

/* hp has the shape of tm_default_spec: llama, 2 layers, dim 64, 4 heads, 2 kv heads,
 * head_dim 16, ffn 96, vocab 128, tied embeddings, no qkv bias. */
void tm_check_default_shape(const struct model_hparams *hp);
/* Every listed tensor is found under its GGUF name with its type, shape and bytes, and the
 * model has no others. */
void tm_check_tensors(const struct model_file *m, const struct tm_tensor *t, int nt);
/* checkpoint_open(path) (modelfile_open and the quantized weights checks) fails with a message
 * containing msg and leaves m empty. */
void tm_expect_open_fails(const char *path, const char *msg);

#endif
