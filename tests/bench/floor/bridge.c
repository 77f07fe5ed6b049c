/*
 * The floor of a bridge ADD on this machine: a static CNI plugin that makes
 * only the kernel changes a bridge + host-local ADD makes, one rtnetlink
 * request each, and nothing else (no config parsing, no IPAM state, no
 * checks, no result beyond the address). tests/bench/bridge.rs runs it
 * through libcni beside wasmcni and the reference, in the 1000-container
 * run: what the kernel alone adds as the bridge fills.
 *
 * Environment, as libcni sets it: CNI_COMMAND (ADD or DEL), CNI_NETNS,
 * CNI_IFNAME, CNI_CONTAINERID, and CNI_ARGS carrying
 * "IP=a.b.c.d/len;GW=a.b.c.d;BR=name" (the benchmark's own keys; stdin is
 * read and ignored).
 *
 * ADD: the bridge if it is missing (up, the gateway's address on it); a
 * veth pair, its peer made in the container's namespace under CNI_IFNAME;
 * the host end enslaved and up; in the container the address, the link
 * up, the default route. DEL: the container's link deleted (as the
 * reference's DEL does). Any failure prints the errno and exits 1.
 *
 * Built by the benchmark: musl-gcc -static -O2 (gcc -static without musl).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct req {
	struct nlmsghdr *h;
	char buf[1024];
};

static void die(const char *what, int err)
{
	printf("{\"cniVersion\":\"1.0.0\",\"code\":999,\"msg\":\"%s: %s\"}\n", what, strerror(err));
	exit(1);
}

static void *start(struct req *r, int type, int flags, const void *hdr, size_t len)
{
	memset(r->buf, 0, sizeof r->buf);
	r->h = (struct nlmsghdr *)r->buf;
	r->h->nlmsg_type = type;
	r->h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	r->h->nlmsg_len = NLMSG_LENGTH(len);
	memcpy(NLMSG_DATA(r->h), hdr, len);
	return NLMSG_DATA(r->h);
}

static struct rtattr *attr(struct req *r, int type, const void *data, size_t len)
{
	struct rtattr *a = (struct rtattr *)(r->buf + NLMSG_ALIGN(r->h->nlmsg_len));
	a->rta_type = type;
	a->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	r->h->nlmsg_len = NLMSG_ALIGN(r->h->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void nest_end(struct req *r, struct rtattr *a)
{
	a->rta_len = (char *)r->buf + r->h->nlmsg_len - (char *)a;
}

/* Sends the request and waits for its acknowledgement: 0 or -errno. */
static int talk(int fd, struct req *r)
{
	static uint32_t seq;
	char ans[8192];
	r->h->nlmsg_seq = ++seq;
	if (send(fd, r->buf, r->h->nlmsg_len, 0) < 0)
		return -errno;
	for (;;) {
		ssize_t n = recv(fd, ans, sizeof ans, 0);
		if (n < 0)
			return -errno;
		for (struct nlmsghdr *h = (struct nlmsghdr *)ans; NLMSG_OK(h, (size_t)n);
		     h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq == seq && h->nlmsg_type == NLMSG_ERROR)
				return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
		}
	}
}

static int rtnl(void)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		die("socket", errno);
	return fd;
}

static void set_up(int fd, int index, int master)
{
	struct req r;
	struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index,
				.ifi_flags = IFF_UP, .ifi_change = IFF_UP};
	start(&r, RTM_SETLINK, 0, &ifi, sizeof ifi);
	if (master)
		attr(&r, IFLA_MASTER, &master, 4);
	int e = talk(fd, &r);
	if (e)
		die("link up", -e);
}

static void add_addr(int fd, int index, struct in_addr a, int len)
{
	struct req r;
	struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = len,
				.ifa_index = index};
	start(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
	attr(&r, IFA_LOCAL, &a, 4);
	attr(&r, IFA_ADDRESS, &a, 4);
	int e = talk(fd, &r);
	if (e && e != -EEXIST)
		die("address", -e);
}

/* CNI_ARGS' value for key (KEY=value;...), or NULL. */
static char *arg(const char *key)
{
	static char copy[512];
	const char *args = getenv("CNI_ARGS");
	if (!args || strlen(args) >= sizeof copy)
		return NULL;
	strcpy(copy, args);
	size_t k = strlen(key);
	for (char *s = strtok(copy, ";"); s; s = strtok(NULL, ";"))
		if (!strncmp(s, key, k) && s[k] == '=')
			return strdup(s + k + 1);
	return NULL;
}

int main(void)
{
	char sink[4096];
	while (read(0, sink, sizeof sink) > 0)
		;
	const char *cmd = getenv("CNI_COMMAND"), *netns = getenv("CNI_NETNS"),
		   *ifname = getenv("CNI_IFNAME"), *cid = getenv("CNI_CONTAINERID");
	if (!cmd || !netns || !ifname || !cid)
		die("CNI environment", EINVAL);
	int ns = open(netns, O_RDONLY | O_CLOEXEC);
	if (strcmp(cmd, "DEL") == 0) {
		if (ns < 0)
			return 0;
		if (setns(ns, CLONE_NEWNET))
			die("setns", errno);
		int fd = rtnl();
		struct req r;
		struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
		start(&r, RTM_DELLINK, 0, &ifi, sizeof ifi);
		attr(&r, IFLA_IFNAME, ifname, strlen(ifname) + 1);
		int e = talk(fd, &r);
		if (e && e != -ENODEV)
			die("delete", -e);
		return 0;
	}
	if (strcmp(cmd, "ADD") != 0)
		die("CNI_COMMAND", EINVAL);
	if (ns < 0)
		die("CNI_NETNS", errno);
	char *ip = arg("IP"), *gw = arg("GW"), *br = arg("BR"), *slash;
	struct in_addr addr, gwa;
	if (!ip || !gw || !br || !(slash = strchr(ip, '/')))
		die("CNI_ARGS", EINVAL);
	*slash = 0;
	int len = atoi(slash + 1);
	if (!inet_pton(AF_INET, ip, &addr) || !inet_pton(AF_INET, gw, &gwa))
		die("CNI_ARGS", EINVAL);

	int host = rtnl();
	struct req r;
	struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
	int bridge = if_nametoindex(br);
	if (!bridge) {
		start(&r, RTM_NEWLINK, NLM_F_CREATE, &ifi, sizeof ifi);
		attr(&r, IFLA_IFNAME, br, strlen(br) + 1);
		struct rtattr *info = attr(&r, IFLA_LINKINFO, NULL, 0);
		attr(&r, IFLA_INFO_KIND, "bridge", 6);
		nest_end(&r, info);
		int e = talk(host, &r);
		if (e && e != -EEXIST)
			die("bridge", -e);
		if (!(bridge = if_nametoindex(br)))
			die("bridge index", errno);
		set_up(host, bridge, 0);
		add_addr(host, bridge, gwa, len);
	}

	/* The veth: the host end named after the container, the peer made in
	 * the container's namespace. */
	char hostname[IFNAMSIZ];
	snprintf(hostname, sizeof hostname, "vf%.13s", cid);
	start(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
	attr(&r, IFLA_IFNAME, hostname, strlen(hostname) + 1);
	struct rtattr *info = attr(&r, IFLA_LINKINFO, NULL, 0);
	attr(&r, IFLA_INFO_KIND, "veth", 4);
	struct rtattr *data = attr(&r, IFLA_INFO_DATA, NULL, 0);
	struct rtattr *peer = attr(&r, VETH_INFO_PEER, &ifi, sizeof ifi);
	attr(&r, IFLA_IFNAME, ifname, strlen(ifname) + 1);
	attr(&r, IFLA_NET_NS_FD, &ns, 4);
	nest_end(&r, peer);
	nest_end(&r, data);
	nest_end(&r, info);
	int e = talk(host, &r);
	if (e)
		die("veth", -e);
	int hindex = if_nametoindex(hostname);
	if (!hindex)
		die("veth index", errno);
	set_up(host, hindex, bridge);

	if (setns(ns, CLONE_NEWNET))
		die("setns", errno);
	int ctr = rtnl();
	int cindex = if_nametoindex(ifname);
	if (!cindex)
		die("container link", errno);
	add_addr(ctr, cindex, addr, len);
	set_up(ctr, cindex, 0);
	struct rtmsg rt = {.rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN,
			   .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_UNIVERSE,
			   .rtm_type = RTN_UNICAST};
	start(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
	attr(&r, RTA_GATEWAY, &gwa, 4);
	attr(&r, RTA_OIF, &cindex, 4);
	e = talk(ctr, &r);
	if (e)
		die("route", -e);

	printf("{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"%s\",\"sandbox\":\"%s\"}],"
	       "\"ips\":[{\"address\":\"%s/%d\",\"gateway\":\"%s\",\"interface\":0}]}\n",
	       ifname, netns, ip, len, gw);
	return 0;
}
