/* Raw tracefs I/O for the tracefs tests: one write() per argument, printing
 * what each returned, so short writes and errnos are visible.
 *
 *   tracefs_io FILE w|a|t DATA...   open O_WRONLY (t: |O_TRUNC, a: |O_APPEND),
 *                                   write each DATA (\n \t \0 \\ escapes),
 *                                   print "<ret>" or "-<errno>" per line
 *   tracefs_io FILE n               O_RDONLY|O_NONBLOCK read: "<n>" or "-<errno>"
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static size_t unescape(const char *s, char *out)
{
	size_t n = 0;
	for (; *s; s++) {
		if (*s == '\\' && s[1]) {
			s++;
			switch (*s) {
			case 'n': out[n++] = '\n'; break;
			case 't': out[n++] = '\t'; break;
			case '0': out[n++] = '\0'; break;
			default: out[n++] = *s; break;
			}
		} else {
			out[n++] = *s;
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	static char buf[65536];
	if (argc < 3)
		return 2;
	if (argv[2][0] == 'n') {
		int fd = open(argv[1], O_RDONLY | O_NONBLOCK);
		if (fd < 0) {
			printf("open -%d\n", errno);
			return 1;
		}
		ssize_t r = read(fd, buf, sizeof(buf));
		printf("%zd\n", r < 0 ? -(ssize_t)errno : r);
		close(fd);
		return 0;
	}
	int flags = O_WRONLY;
	if (argv[2][0] == 't')
		flags |= O_TRUNC;
	if (argv[2][0] == 'a')
		flags |= O_APPEND;
	int fd = open(argv[1], flags);
	if (fd < 0) {
		printf("open -%d\n", errno);
		return 1;
	}
	for (int i = 3; i < argc; i++) {
		size_t n = unescape(argv[i], buf);
		ssize_t r = write(fd, buf, n);
		printf("%zd\n", r < 0 ? -(ssize_t)errno : r);
	}
	close(fd);
	return 0;
}
