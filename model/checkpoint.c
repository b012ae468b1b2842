/* A model file opened and its quantized weights checked (checkpoint.h). */
#include "checkpoint.h"

#include "fp8w.h"
#include "int4w.h"

int checkpoint_open(struct model_file *m, const char *path, char *err) {
    if (modelfile_open(m, path, err)) return -1;
    if (m->hf_dir && (fp8w_check(m, err) || int4w_check(m, err))) {
        modelfile_close(m);
        return -1;
    }
    return 0;
}
