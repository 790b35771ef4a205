// SPDX-License-Identifier: MIT
/*
 * cunit-select.c: an LD_PRELOAD library for scripts/libtracefs-utest that
 * runs one test of an unmodified CUnit program at a time, and can make the
 * tracing ring buffer unmappable as on a kernel before 6.10.
 *
 * libtracefs's trace-utest registers its tests and calls
 * CU_basic_run_tests(), which runs them all in one process, so one crash
 * (a SIGBUS on a mapped page, a NULL dereference) loses every test after it,
 * and it has no option to run a single test. This library defines
 * CU_basic_run_tests(), found before libcunit's, which looks at
 *
 *   MONFS_CUNIT_LIST=1        print "SUITE<TAB>TEST" for every registered test
 *                             and run nothing
 *   MONFS_CUNIT_TEST=NAME     run only the test NAME (with its suite's init
 *                             and cleanup, as CUnit does for any test)
 *
 * and with neither runs everything as libcunit would. After a run it prints
 *   monfs-cunit: RESULT
 * where RESULT is "passed", "failed N of M assertions", "suite init failed",
 * "suite cleanup failed" or "no such test", and exits 0 only for "passed"
 * (trace-utest's main returns 0 whatever happened).
 *
 *   MONFS_NO_TRACE_MMAP=1     mmap(2) of a file named trace_pipe_raw fails
 *                             with ENODEV, which is what a kernel without the
 *                             mapped ring buffer (before 6.10) answers:
 *                             libtracefs then reads the buffer with read(2)
 *
 * Built by scripts/libtracefs-utest:
 *   gcc -shared -fPIC -o cunit-select.so cunit-select.c -ldl -lcunit
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

static int ends_with_trace_pipe_raw(int fd)
{
	char link[64], path[4096];
	ssize_t n;
	const char *want = "/trace_pipe_raw";
	size_t w = strlen(want);

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n < 0)
		return 0;
	path[n] = '\0';
	return (size_t)n >= w && strcmp(path + n - w, want) == 0;
}

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);

static void *filtered_mmap(const char *name, void *addr, size_t len, int prot, int flags, int fd,
			   off_t off)
{
	const char *no = getenv("MONFS_NO_TRACE_MMAP");
	mmap_fn real = (mmap_fn)dlsym(RTLD_NEXT, name);

	if (no && *no && strcmp(no, "0") != 0 && fd >= 0 && !(flags & MAP_ANONYMOUS) &&
	    ends_with_trace_pipe_raw(fd)) {
		errno = ENODEV;
		return MAP_FAILED;
	}
	return real(addr, len, prot, flags, fd, off);
}

/* Both names: a program built with _FILE_OFFSET_BITS=64 calls mmap64. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return filtered_mmap("mmap", addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return filtered_mmap("mmap64", addr, len, prot, flags, fd, off);
}

static void finish(CU_ErrorCode rc, int found)
{
	unsigned int failed = CU_get_number_of_failures();
	unsigned int asserts = CU_get_number_of_asserts();
	const char *res = "passed";
	char buf[128];
	int ok = 0;

	if (!found)
		res = "no such test";
	else if (rc == CUE_SINIT_FAILED || CU_get_number_of_suites_failed() > 0)
		res = "suite init failed";
	else if (failed > 0) {
		snprintf(buf, sizeof(buf), "failed %u of %u assertions", failed, asserts);
		res = buf;
	} else if (rc == CUE_SCLEAN_FAILED)
		res = "suite cleanup failed";
	else if (CU_get_number_of_tests_run() == 0)
		res = "no test ran";
	else
		ok = 1;
	fflush(stdout);
	fprintf(stdout, "\nmonfs-cunit: %s\n", res);
	fflush(stdout);
	CU_cleanup_registry();
	_exit(ok ? 0 : 1);
}

CU_ErrorCode CU_basic_run_tests(void)
{
	CU_pTestRegistry reg = CU_get_registry();
	const char *list = getenv("MONFS_CUNIT_LIST");
	const char *only = getenv("MONFS_CUNIT_TEST");
	CU_pSuite s;
	CU_pTest t;

	if (list && *list) {
		for (s = reg->pSuite; s; s = s->pNext)
			for (t = s->pTest; t; t = t->pNext)
				printf("%s\t%s\n", s->pName, t->pName);
		fflush(stdout);
		_exit(0);
	}
	if (!only || !*only) {
		CU_ErrorCode (*real)(void) =
			(CU_ErrorCode (*)(void))dlsym(RTLD_NEXT, "CU_basic_run_tests");
		finish(real(), 1);
	}
	for (s = reg->pSuite; s; s = s->pNext)
		for (t = s->pTest; t; t = t->pNext)
			if (strcmp(t->pName, only) == 0)
				finish(CU_basic_run_test(s, t), 1);
	finish(CUE_NOTEST, 0);
	return CUE_NOTEST;
}
