/*
 * sendfile_cat: copy monfs snapshot files to stdout with sendfile(2), the way
 * busybox cat does, after an fstat; with -2, two opens of the same file at once.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy(const char *name, int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		perror("fstat");
		return 1;
	}
	long sent = 0;
	for (;;) {
		ssize_t n = sendfile(1, fd, NULL, 1 << 16);
		if (n < 0) {
			perror("sendfile");
			return 1;
		}
		if (n == 0)
			break;
		sent += n;
	}
	fprintf(stderr, "%s fstat=%lld sent=%ld\n", name, (long long)st.st_size, sent);
	return 0;
}

int main(int argc, char **argv)
{
	int twice = argc > 1 && strcmp(argv[1], "-2") == 0;
	for (int i = 1 + twice; i < argc; i++) {
		int a = open(argv[i], O_RDONLY);
		int b = twice ? open(argv[i], O_RDONLY) : -1;
		if (a < 0 || (twice && b < 0)) {
			perror(argv[i]);
			return 1;
		}
		if ((twice && copy(argv[i], b)) || copy(argv[i], a))
			return 1;
		close(a);
		if (twice)
			close(b);
	}
	return 0;
}
