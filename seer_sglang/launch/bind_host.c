/* Loaded with LD_PRELOAD into the processes seer starts on one host (bind_host.py): a bind() to every
 * interface (0.0.0.0 or ::) binds to $SEER_BIND_HOST instead.
 *
 * SGLang's scheduler (torch.distributed's TCP store) and Mooncake's transfer engine (its RPC/handshake
 * and TCP data ports, which carry KV pages without authentication) bind to every interface whatever
 * host they are given, and offer no setting for it.
 *
 * An IPv6 wildcard becomes the IPv4 host mapped into IPv6 (::ffff:127.0.0.1), so a dual-stack socket
 * still accepts the IPv4 connections its peers make to the advertised address; an IPv6-only socket,
 * which cannot take a mapped address, gets ::1 when the host is IPv4 loopback. A bind to a specific
 * address, and every other call, is left as it is. A failed rewrite fails the bind: a port must not
 * silently open on every interface.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind(void) {
    static bind_fn real;
    if (!real) real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    return real;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    bind_fn real = real_bind();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    const char *host = getenv("SEER_BIND_HOST");
    if (!host || !*host || !addr) return real(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr != htonl(INADDR_ANY)) return real(fd, addr, len);
        if (inet_pton(AF_INET, host, &in4.sin_addr) != 1) {
            errno = EADDRNOTAVAIL;  /* an IPv6 host for an IPv4 socket: refuse rather than bind all */
            return -1;
        }
        return real(fd, (const struct sockaddr *)&in4, sizeof in4);
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        struct in_addr v4;
        memcpy(&in6, addr, sizeof in6);
        if (!IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) return real(fd, addr, len);
        if (inet_pton(AF_INET6, host, &in6.sin6_addr) != 1) {
            if (inet_pton(AF_INET, host, &v4) != 1) {
                errno = EADDRNOTAVAIL;
                return -1;
            }
            memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
            in6.sin6_addr.s6_addr[10] = 0xff;
            in6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&in6.sin6_addr.s6_addr[12], &v4, 4);
            int rc = real(fd, (const struct sockaddr *)&in6, sizeof in6);
            if (rc == 0 || errno != EINVAL || ((const unsigned char *)&v4)[0] != 127) return rc;
            in6.sin6_addr = in6addr_loopback;  /* IPV6_V6ONLY: no mapped address; loopback is ::1 */
        }
        return real(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
    return real(fd, addr, len);
}
