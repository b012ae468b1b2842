/* Defaults of the address sanitizer's run time for every C test of the Asan build (tests/run
 * adds leak checking through ASAN_OPTIONS, tests/CMakeLists.txt each test's LSAN_OPTIONS with
 * the Open MPI suppressions; both take precedence). Linked as an object into each test, so no test
 * can miss it.
 *
 * intercept_tls_get_addr=0: GCC 12's sanitizer run time (libsanitizer of LLVM 14) records each
 * thread's dynamic TLS blocks from its __tls_get_addr interceptor, and when a block's address
 * is 16 past a page boundary it takes the 16 bytes before it for a glibc 2.19 header giving
 * the block's start and size. Since glibc 2.25 those blocks come from malloc (here ASan's),
 * so that header is whatever lies there, and at exit LeakSanitizer scans a garbage range and
 * dies ("Tracer caught signal 11", after "DTLS 9 at 0x...3ba5-0x...4ca7"). The blocks in
 * question belong to libraries Open MPI's hwloc loads with dlopen (libOpenCL through its
 * OpenCL plugin), and whether one lands on such an address depends on the machine: it did on
 * an AMD EPYC, not on Intel Sapphire Rapids. LLVM 17 replaced the guess with an allocator
 * lookup; with GCC 12 the only safe course is not to track dynamic TLS. Leak checking stays
 * on for every heap block: without these roots LeakSanitizer can only report more, never
 * less (a block pointed to from a dlopen'd library's TLS alone would be reported). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "intercept_tls_get_addr=0"; }
