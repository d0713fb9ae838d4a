// SPDX-License-Identifier: GPL-2.0
/*
 * Handles belong to the process that opened the file: a forked child, a
 * process that received the fd over a UNIX socket and one without
 * CAP_SYS_RAWIO are refused.
 */
#define _GNU_SOURCE
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "harness.h"

static int send_fd(int sock, int fd)
{
	char c = 'f';
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	int fd;

	if (recvmsg(sock, &msg, 0) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/* another process cannot use a handle: forked child, fd over a UNIX socket */
static void t_isolation(void)
{
	int sv[2], st;
	uint64_t hbuf[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		FAIL("socketpair");
		return;
	}
	pid = fork();
	if (pid == 0) {
		/* receiver: a process that never opened the file */
		int f, own, efd = edu_open(), gfd = gs_open();
		struct peerdma_query q;
		struct peerdma_event ev;

		close(sv[0]);
		f = recv_fd(sv[1]);
		if (read(sv[1], hbuf, sizeof(hbuf)) != sizeof(hbuf))
			_exit(3);
		if (f < 0)
			_exit(2);
		EXPECT_ERR(query(f, hbuf[0], &q), EACCES);
		EXPECT_ERR(unpin(f, hbuf[0]), EACCES);
		EXPECT_ERR(-!pin(f, PEERDMA_KIND_HOST, 0, (uintptr_t)&q, 8, NULL), EACCES);
		EXPECT_ERR(read(f, &ev, sizeof(ev)), EACCES);
		struct peerdma_edu_attach a = { .peerdma_fd = f, .handle = hbuf[0] };

		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EACCES);
		own = pd_open();
		EXPECT_ERR(query(own, hbuf[0], &q), ENOENT);
		EXPECT_ERR(unpin(own, hbuf[0]), ENOENT);
		a.peerdma_fd = own;
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), ENOENT);
		a.peerdma_fd = gfd;	/* not a peerdma fd */
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EINVAL);
		a.peerdma_fd = 999;
		EXPECT_ERR(ioctl(efd, PEERDMA_EDU_IOC_ATTACH, &a), EBADF);
		/* someone else's GPU memory: the driver refuses the pin */
		EXPECT_ERR(-!pin(own, PEERDMA_KIND_GPU, 0, hbuf[1], GPAGE, NULL), EINVAL);
		_exit(fails ? 1 : 0);
	}
	close(sv[1]);
	int fd = pd_open(), gfd = gs_open();
	char *m = map_anon(PAGE);
	uint64_t va = gs_alloc(gfd, GPAGE, NULL);

	hbuf[0] = pin(fd, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);
	hbuf[1] = va;
	EXPECT(hbuf[0] != 0);
	EXPECT_OK(send_fd(sv[0], fd));
	EXPECT(write(sv[0], hbuf, sizeof(hbuf)) == sizeof(hbuf));
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("receiver failed (status %#x)", st);

	/* forked child: inherited fd, different process */
	pid = fork();
	if (pid == 0) {
		struct peerdma_query q;

		EXPECT_ERR(query(fd, hbuf[0], &q), EACCES);
		EXPECT_ERR(unpin(fd, hbuf[0]), EACCES);
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("forked child failed (status %#x)", st);
	EXPECT_EQ(state_of(fd, hbuf[0]), PEERDMA_STATE_LIVE);
	EXPECT_OK(unpin(fd, hbuf[0]));

	/* no CAP_SYS_RAWIO: no physical addresses */
	pid = fork();
	if (pid == 0) {
		struct peerdma_get_pages g;
		uint64_t a[1];
		int f2 = pd_open();
		uint64_t h = pin(f2, PEERDMA_KIND_HOST, 0, (uintptr_t)m, PAGE, NULL);

		EXPECT_OK(drop_cap(CAP_SYS_RAWIO));
		EXPECT_ERR(get_pages(f2, h, a, 1, &g), EPERM);
		EXPECT_OK(unpin(f2, h));
		_exit(fails ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("no-RAWIO child failed (status %#x)", st);
	close(fd);
	close(gfd);
	close(sv[0]);
}

const struct pd_test pd_isolation_tests[] = {
	{ "isolation", t_isolation },
	{ NULL },
};
