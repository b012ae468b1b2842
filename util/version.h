/* What this build is: version, git commit, backends and CUDA architectures compiled in. */
#ifndef TPD_VERSION_H
#define TPD_VERSION_H

const char *version_number(void);
const char *version_commit(void);
/* "cpu" or "cpu, cuda (archs 80;90)" */
const char *version_backends(void);
/* One line: "tpd 0.1.0 (commit 1a2b3c4d5e6f, backends: cpu)" with `program` for "tpd". */
void version_line(const char *program, char *buf, unsigned long len);

#endif
