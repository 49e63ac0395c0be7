/*
 * client.c: connections, requests, proxies and the deadline.
 *
 * One request: check it (nothing is sent when it is malformed), pick the proxy, reuse
 * the open socket when it leads to the same place and is still quiet, or connect
 * (getaddrinfo, non-blocking connects racing over the addresses as Happy Eyeballs does,
 * CONNECT tunnel, TLS handshake, all within the connect deadline), write the head and the body, and feed
 * what comes back to the parser until the final response is complete. Every wait is
 * a poll(2) bounded by the deadline; sockets are SOCK_CLOEXEC and written with
 * MSG_NOSIGNAL.
 */
#include "cairn_http.h"
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MESSAGE_CAP 512
#define HOST_CAP 256
#define AUTH_CAP 1024
#define READ_CHUNK 16384
#define DEFAULT_PROXY_PORT 1080

const char *cairn_http_strerror(int err)
{
    switch (err) {
    case CAIRN_HTTP_OK: return "success";
    case CAIRN_HTTP_ECONNECT: return "connect";
    case CAIRN_HTTP_ETIMEOUT: return "timeout";
    case CAIRN_HTTP_ETLS: return "tls";
    case CAIRN_HTTP_ENETWORK: return "network";
    case CAIRN_HTTP_EINVALID: return "invalid request";
    case CAIRN_HTTP_ENOMEM: return "out of memory";
    case CAIRN_HTTP_ENOTSUP: return "not supported here";
    default: return "unknown error";
    }
}

int cairn_http__is_token(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* ------------------------------------------------------------------------------ */
/* Endpoints: a URL's or a proxy's host and port                                   */
/* ------------------------------------------------------------------------------ */

typedef struct endpoint {
    char host[HOST_CAP]; /* lowercase; an IPv6 literal without brackets */
    int port;
    int is_ipv6;
    int is_ip;
} endpoint;

static int host_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'
           || c == '.' || c == '_';
}

/* Parses "host", "[v6]", each with an optional ":port", from text[0..len).
 * Returns 0, or -1 when it is not a usable host and port. */
static int parse_host_port(const char *text, size_t len, int default_port, endpoint *out)
{
    size_t i = 0, host_len;
    const char *host;
    memset(out, 0, sizeof *out);
    if (len > 0 && text[0] == '[') {
        const char *close = memchr(text, ']', len);
        if (!close) return -1;
        host = text + 1;
        host_len = (size_t)(close - host);
        i = (size_t)(close - text) + 1;
        out->is_ipv6 = 1;
    } else {
        while (i < len && text[i] != ':') {
            if (!host_byte((unsigned char)text[i])) return -1;
            i++;
        }
        host = text;
        host_len = i;
    }
    if (host_len == 0 || host_len >= HOST_CAP) return -1;
    for (size_t k = 0; k < host_len; k++) {
        char c = host[k];
        out->host[k] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    out->host[host_len] = 0;
    unsigned char address[sizeof(struct in6_addr)];
    if (out->is_ipv6) {
        if (inet_pton(AF_INET6, out->host, address) != 1) return -1;
        out->is_ip = 1;
    } else {
        out->is_ip = inet_pton(AF_INET, out->host, address) == 1;
    }
    out->port = default_port;
    if (i < len) {
        if (text[i] != ':') return -1;
        i++;
        if (i < len) {
            long port = 0;
            for (; i < len; i++) {
                if (text[i] < '0' || text[i] > '9' || port > 65535) return -1;
                port = port * 10 + (text[i] - '0');
            }
            if (port < 1 || port > 65535) return -1;
            out->port = (int)port;
        }
    }
    return 0;
}

/* "host" or "[v6]" followed by ":port" when `with_port` (for Host and CONNECT). */
static int format_authority(char *out, size_t cap, const endpoint *e, int with_port)
{
    const char *open = e->is_ipv6 ? "[" : "", *close = e->is_ipv6 ? "]" : "";
    int n = with_port ? snprintf(out, cap, "%s%s%s:%d", open, e->host, close, e->port)
                      : snprintf(out, cap, "%s%s%s", open, e->host, close);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* An absolute http(s) URL: scheme, endpoint, and path-and-query (fragment dropped). */
typedef struct target {
    int https;
    endpoint where;
    const char *path; /* into the URL; NULL means "/" */
    size_t path_len;
} target;

static int starts_with_ci(const char *text, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    if (len < n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != prefix[i]) return 0;
    }
    return 1;
}

static int parse_url(const char *url, size_t len, target *out, const char **why)
{
    size_t start;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c >= 0x7F) {
            *why = "the URL contains a space, a control or a non-ASCII character";
            return -1;
        }
    }
    if (starts_with_ci(url, len, "http://")) {
        out->https = 0;
        start = 7;
    } else if (starts_with_ci(url, len, "https://")) {
        out->https = 1;
        start = 8;
    } else {
        *why = "the URL is not an absolute http or https URL";
        return -1;
    }
    size_t end = start;
    while (end < len && url[end] != '/' && url[end] != '?' && url[end] != '#') end++;
    if (memchr(url + start, '@', end - start)) {
        *why = "the URL holds user credentials, which are not sent";
        return -1;
    }
    if (parse_host_port(url + start, end - start, out->https ? 443 : 80, &out->where) != 0) {
        *why = "the URL has no valid host and port";
        return -1;
    }
    const char *fragment = memchr(url + end, '#', len - end);
    size_t path_end = fragment ? (size_t)(fragment - url) : len;
    out->path = path_end > end ? url + end : NULL;
    out->path_len = path_end - end;
    return 0;
}

int cairn_http_url_check(const char *url, size_t url_len, const char **why)
{
    target t;
    const char *problem = "the URL is missing";
    if (url && parse_url(url, url_len, &t, &problem) == 0) return 0;
    if (why) *why = problem;
    return CAIRN_HTTP_EINVALID;
}

/* ------------------------------------------------------------------------------ */
/* Proxies                                                                          */
/* ------------------------------------------------------------------------------ */

typedef struct proxy {
    int set;
    endpoint where;
    char authorization[AUTH_CAP]; /* "Basic ..." or empty */
} proxy;

/* A proxy variable as read at client creation: unset (name NULL), usable (`p.set`), or
 * a value Cairn cannot use (`problem`, said only when the variable applies). */
typedef struct proxy_variable {
    const char *name; /* the variable's name, as read */
    proxy p;
    char problem[256];
} proxy_variable;

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes text[0..len) onto out; returns the new length, or -1. */
static long percent_decode(const char *text, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '%') {
            if (i + 2 >= len) return -1;
            int high = hex_digit(text[i + 1]), low = hex_digit(text[i + 2]);
            if (high < 0 || low < 0) return -1;
            c = (char)(high * 16 + low);
            i += 2;
        }
        if (n + 1 >= cap) return -1;
        out[n++] = c;
    }
    return (long)n;
}

static void base64(const unsigned char *in, size_t len, char *out)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < len) v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len) v |= in[i + 2];
        out[o++] = digits[(v >> 18) & 63];
        out[o++] = digits[(v >> 12) & 63];
        out[o++] = i + 1 < len ? digits[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? digits[v & 63] : '=';
    }
    out[o] = 0;
}

/* "[http://][user[:password]@]host[:port][/]"; -1 for anything else, with `*why` set
 * when the scheme is the reason. */
static int parse_proxy(const char *text, proxy *out, const char **why)
{
    size_t len = strlen(text);
    memset(out, 0, sizeof *out);
    if (strstr(text, "://")) {
        if (!starts_with_ci(text, len, "http://")) {
            *why = starts_with_ci(text, len, "https://") ? "Cairn cannot speak TLS to a proxy (https://)"
                   : starts_with_ci(text, len, "socks") ? "Cairn speaks no SOCKS"
                                                         : "an unknown proxy scheme";
            return -1;
        }
        text += 7;
        len -= 7;
    }
    if (len > 0 && text[len - 1] == '/') len--;
    const char *at = NULL;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '@') at = text + i;
    }
    if (at) {
        size_t credentials_len = (size_t)(at - text);
        const char *colon = memchr(text, ':', credentials_len);
        size_t user_len = colon ? (size_t)(colon - text) : credentials_len;
        char plain[512];
        long user = percent_decode(text, user_len, plain, sizeof plain);
        if (user < 0) return -1;
        size_t n = (size_t)user;
        plain[n++] = ':';
        if (colon) {
            long password = percent_decode(colon + 1, credentials_len - user_len - 1, plain + n,
                                           sizeof plain - n);
            if (password < 0) return -1;
            n += (size_t)password;
        }
        char encoded[((sizeof plain + 2) / 3) * 4 + 1];
        base64((const unsigned char *)plain, n, encoded);
        snprintf(out->authorization, sizeof out->authorization, "Basic %s", encoded);
        len -= credentials_len + 1;
        text = at + 1;
    }
    if (parse_host_port(text, len, DEFAULT_PROXY_PORT, &out->where) != 0) return -1;
    out->set = 1;
    return 0;
}

/* Whether the IP literal `host` lies in the CIDR range entry[0..len), such as
 * "10.0.0.0/8" or "fd00::/8". */
static int in_cidr(const endpoint *e, const char *entry, size_t len)
{
    const char *slash = memchr(entry, '/', len);
    if (!slash || !e->is_ip) return 0;
    char network[64];
    size_t network_len = (size_t)(slash - entry);
    if (network_len == 0 || network_len >= sizeof network) return 0;
    memcpy(network, entry, network_len);
    network[network_len] = 0;
    long bits = 0;
    size_t digits = len - network_len - 1;
    if (digits == 0 || digits > 3) return 0;
    for (size_t i = 0; i < digits; i++) {
        char c = slash[1 + i];
        if (c < '0' || c > '9') return 0;
        bits = bits * 10 + (c - '0');
    }
    unsigned char want[16], have[16];
    int family = e->is_ipv6 ? AF_INET6 : AF_INET;
    long size = e->is_ipv6 ? 128 : 32;
    if (bits > size || inet_pton(family, network, want) != 1 || inet_pton(family, e->host, have) != 1) return 0;
    for (long i = 0; i < bits; i++) {
        int mask = 0x80 >> (i % 8);
        if ((want[i / 8] & mask) != (have[i / 8] & mask)) return 0;
    }
    return 1;
}

/* Whether `host` is listed in no_proxy: "*", the host itself, a domain it is in (with
 * or without a leading dot), or for an IP literal the address itself or a CIDR range
 * holding it. */
static int bypasses_proxy(const char *no_proxy, const endpoint *e)
{
    if (!no_proxy) return 0;
    size_t host_len = strlen(e->host);
    const char *cursor = no_proxy;
    for (;;) {
        const char *end = strchr(cursor, ',');
        size_t len = end ? (size_t)(end - cursor) : strlen(cursor);
        const char *entry = cursor;
        while (len > 0 && (*entry == ' ' || *entry == '\t')) { entry++; len--; }
        while (len > 0 && (entry[len - 1] == ' ' || entry[len - 1] == '\t')) len--;
        if (len == 1 && entry[0] == '*') return 1;
        if (len >= 2 && entry[0] == '[' && entry[len - 1] == ']') { entry++; len -= 2; }
        if (in_cidr(e, entry, len)) return 1;
        if (len > 0 && entry[0] == '.' && !e->is_ip) { entry++; len--; }
        if (len > 0 && len <= host_len) {
            int same = 1;
            const char *tail = e->host + host_len - len;
            for (size_t i = 0; i < len && same; i++) {
                char c = entry[i];
                if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
                same = tail[i] == c;
            }
            if (same && (len == host_len || (!e->is_ip && tail[-1] == '.'))) return 1;
        }
        if (!end) return 0;
        cursor = end + 1;
    }
}

/* ------------------------------------------------------------------------------ */
/* Client                                                                            */
/* ------------------------------------------------------------------------------ */

struct cairn_http_client {
    size_t max_body_bytes;
    char *ca_file;
    char *cert_file;
    char *key_file;
    int tls_library;
    proxy_variable http_proxy;  /* http_proxy (never HTTP_PROXY) */
    proxy_variable https_proxy; /* https_proxy, else HTTPS_PROXY */
    proxy_variable all_proxy;   /* all_proxy, else ALL_PROXY */
    char *no_proxy;
    pthread_mutex_t tls_lock;
    void *tls_context; /* made on the first https request, under tls_lock */
    atomic_int tls_prepared; /* cairn_http_client_prepare made its one try */
};

static const char *lookup(const char *const *environment, const char *name)
{
    if (!environment) return getenv(name);
    size_t len = strlen(name);
    for (const char *const *entry = environment; *entry; entry++) {
        if (strncmp(*entry, name, len) == 0 && (*entry)[len] == '=') return *entry + len + 1;
    }
    return NULL;
}

/* The lowercase variable when set (even empty), else the uppercase one. */
static const char *lookup_pair(const char *const *environment, const char *lower, const char *upper,
                               const char **used)
{
    const char *value = lookup(environment, lower);
    *used = lower;
    if (!value && upper) {
        value = lookup(environment, upper);
        *used = upper;
    }
    return value;
}

/* Reads one proxy variable (an empty value counts as unset, as curl does). */
static void read_proxy(const char *const *environment, const char *lower, const char *upper,
                       proxy_variable *out)
{
    const char *name;
    const char *value = lookup_pair(environment, lower, upper, &name);
    memset(out, 0, sizeof *out);
    if (!value || !*value) return;
    out->name = name;
    const char *why = "not a proxy URL";
    if (parse_proxy(value, &out->p, &why) != 0)
        snprintf(out->problem, sizeof out->problem,
                 "%s is not a usable proxy: %s (expected http://[user:password@]host:port; "
                 "NO_PROXY=<host> sends this URL directly)",
                 name, why);
}

/* The proxy for `t`, curl's way: none when no_proxy lists the host; else the variable
 * of the URL's scheme, else all_proxy. Returns the variable (NULL: direct); one whose
 * value cannot be used is returned with its `problem` set. */
static const proxy_variable *proxy_for(const cairn_http_client_t *client, const target *t)
{
    if (bypasses_proxy(client->no_proxy, &t->where)) return NULL;
    const proxy_variable *scheme = t->https ? &client->https_proxy : &client->http_proxy;
    if (scheme->name) return scheme;
    return client->all_proxy.name ? &client->all_proxy : NULL;
}

int cairn_http_client_proxy(const cairn_http_client_t *client, const char *url, size_t url_len, char *out,
                            size_t cap)
{
    target t;
    const char *problem = "the URL is missing";
    if (!url || parse_url(url, url_len, &t, &problem) != 0) {
        snprintf(out, cap, "%s", problem);
        return CAIRN_HTTP_EINVALID;
    }
    const proxy_variable *via = proxy_for(client, &t);
    if (!via) {
        snprintf(out, cap, "direct");
        return CAIRN_HTTP_OK;
    }
    if (via->problem[0]) {
        snprintf(out, cap, "%s", via->problem);
        return CAIRN_HTTP_EINVALID;
    }
    char authority[HOST_CAP + 16];
    format_authority(authority, sizeof authority, &via->p.where, 1);
    snprintf(out, cap, "http://%s (%s)", authority, via->name);
    return CAIRN_HTTP_OK;
}

int cairn_http_client_new(const cairn_http_client_options_t *options, cairn_http_client_t **out)
{
    cairn_http_client_options_t defaults;
    memset(&defaults, 0, sizeof defaults);
    if (!options) options = &defaults;
    *out = NULL;
    cairn_http_client_t *client = calloc(1, sizeof *client);
    if (!client) return CAIRN_HTTP_ENOMEM;
    pthread_mutex_init(&client->tls_lock, NULL);
    client->max_body_bytes = options->max_body_bytes;
    client->tls_library = options->tls_library;
    if (options->ca_file && !(client->ca_file = strdup(options->ca_file))) goto nomem;
    if (options->client_cert_file && !(client->cert_file = strdup(options->client_cert_file))) goto nomem;
    if (options->client_key_file && !(client->key_file = strdup(options->client_key_file))) goto nomem;

    read_proxy(options->environment, "http_proxy", NULL, &client->http_proxy);
    read_proxy(options->environment, "https_proxy", "HTTPS_PROXY", &client->https_proxy);
    read_proxy(options->environment, "all_proxy", "ALL_PROXY", &client->all_proxy);
    const char *name;
    const char *value = lookup_pair(options->environment, "no_proxy", "NO_PROXY", &name);
    if (value && *value && !(client->no_proxy = strdup(value))) goto nomem;
    *out = client;
    return CAIRN_HTTP_OK;
nomem:
    cairn_http_client_free(client);
    return CAIRN_HTTP_ENOMEM;
}


void cairn_http_client_free(cairn_http_client_t *client)
{
    if (!client) return;
    cairn_http__tls_context_free(client->tls_context);
    pthread_mutex_destroy(&client->tls_lock);
    free(client->ca_file);
    free(client->cert_file);
    free(client->key_file);
    free(client->no_proxy);
    free(client);
}

/* The shared TLS context, made once; NULL with `message` set when it cannot be. */
static void *tls_context(cairn_http_client_t *client, char *message, size_t cap)
{
    pthread_mutex_lock(&client->tls_lock);
    if (!client->tls_context) {
        cairn_http__tls_files files = {client->ca_file, client->cert_file, client->key_file};
        client->tls_context = cairn_http__tls_context_new(&files, client->tls_library, message, cap);
    }
    void *context = client->tls_context;
    pthread_mutex_unlock(&client->tls_lock);
    return context;
}

int cairn_http_client_prepare(cairn_http_client_t *client, const char *url)
{
    if (!client || !url || strncasecmp(url, "https://", 8) != 0) return 0;
    /* Tried once: a context that cannot be made (no TLS library, a bad CA file) is
     * tried again, and its reason given, by each send, not twice per send. */
    if (atomic_exchange(&client->tls_prepared, 1)) return 0;
    return cairn_http_client_check_tls(client, url, NULL, 0);
}

int cairn_http_client_check_tls(cairn_http_client_t *client, const char *url, char *message, size_t cap)
{
    if (message && cap) message[0] = 0;
    if (!client || !url || strncasecmp(url, "https://", 8) != 0) return 0;
    char scratch[256];
    if (!message || cap == 0) {
        message = scratch;
        cap = sizeof scratch;
    }
    void *context = tls_context(client, message, cap);
    return context && cairn_http__tls_context_ready(context, message, cap) ? 0 : CAIRN_HTTP_ETLS;
}

/* ------------------------------------------------------------------------------ */
/* Connections                                                                       */
/* ------------------------------------------------------------------------------ */

struct cairn_http_conn {
    cairn_http_client_t *client;
    int fd;
    void *tls;
    int reusable;
    /* TLS sessions started on this slot (start_tls), for the release of their setup's
     * code pages after the send (tls.c). */
    unsigned tls_sessions;
    /* Where the open socket leads: scheme, host, port and proxy. */
    char destination[2 * HOST_CAP + 32];
    /* The buffers, in one private mapping of `mapped` bytes: read bytes, the response's
     * headers and its body. */
    uint8_t *input;
    char *headers;
    uint8_t *body;
    size_t mapped;
    char message[MESSAGE_CAP];
};

cairn_http_conn_t *cairn_http_conn_new(cairn_http_client_t *client)
{
    cairn_http_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn) return NULL;
    /* The buffers are sized for the largest response, and mapped: their pages take
     * memory only once touched, so a response of a few hundred bytes costs a page of
     * each. (Only bytes, never a pointer, are kept there.) */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = (READ_CHUNK + CAIRN_HTTP_MAX_HEADER_BYTES + client->max_body_bytes + page - 1) / page * page;
    void *memory = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        free(conn);
        return NULL;
    }
    conn->mapped = mapped;
    conn->client = client;
    conn->fd = -1;
    conn->input = memory;
    conn->headers = (char *)memory + READ_CHUNK;
    conn->body = client->max_body_bytes ? (uint8_t *)memory + READ_CHUNK + CAIRN_HTTP_MAX_HEADER_BYTES : NULL;
    return conn;
}

static void disconnect(cairn_http_conn_t *conn)
{
    cairn_http__tls_session_free(conn->tls);
    conn->tls = NULL;
    if (conn->fd >= 0) close(conn->fd);
    conn->fd = -1;
    conn->reusable = 0;
    conn->destination[0] = 0;
}

void cairn_http_conn_free(cairn_http_conn_t *conn)
{
    if (!conn) return;
    disconnect(conn);
    munmap(conn->input, conn->mapped);
    free(conn);
}

const char *cairn_http_conn_error(const cairn_http_conn_t *conn)
{
    return conn->message;
}

static int failure(cairn_http_conn_t *conn, int code, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static int failure(cairn_http_conn_t *conn, int code, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(conn->message, sizeof conn->message, format, args);
    va_end(args);
    return code;
}

/* strerror, thread-safe: the text of `error` in `buffer` (POSIX strerror_r: this file
 * does not define _GNU_SOURCE). */
const char *cairn_http__strerror(int error, char *buffer, size_t cap)
{
    if (strerror_r(error, buffer, cap) != 0) snprintf(buffer, cap, "error %d", error);
    return buffer;
}

/* ---- Time ---- */

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Waits until `fd` is ready for `events` or `deadline` passes: 1 ready, 0 timed out,
 * -1 with errno. */
static int wait_for(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd poller = {.fd = fd, .events = events, .revents = 0};
        int ready = poll(&poller, 1, left > 60000 ? 60000 : (int)left);
        if (ready > 0) return 1;
        if (ready < 0 && errno != EINTR) return -1;
    }
}

/* ---- Plain and TLS I/O with the deadline ---- */

ssize_t cairn_http__send(int fd, const void *data, size_t len)
{
    ssize_t n;
    do n = send(fd, data, len, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
    return n;
}

ssize_t cairn_http__recv(int fd, void *data, size_t len)
{
    ssize_t n;
    do n = recv(fd, data, len, 0); while (n < 0 && errno == EINTR);
    return n;
}

static ssize_t read_some(cairn_http_conn_t *conn, int64_t deadline, const char *what);

/* What a server said while the request was still being sent (early: a 413 or a 401
 * before the body is read): the parser it is fed to, and whether it is complete. */
typedef struct early_answer {
    cairn_http_parser_t *parser;
    int complete;
} early_answer;

/* Reads what the server has sent into `early`'s parser, waiting until `deadline`:
 * 0 (nothing more yet, or complete), or a CAIRN_HTTP_E* code. */
static int read_early(cairn_http_conn_t *conn, early_answer *early, int64_t deadline)
{
    while (!early->complete) {
        ssize_t got = read_some(conn, deadline, "the response");
        if (got == CAIRN_HTTP_ETIMEOUT) return CAIRN_HTTP_OK;
        if (got < 0) return (int)got;
        size_t used = 0;
        cairn_http_parse_status_t status = got == 0 ? cairn_http_parser_finish(early->parser)
                                                    : cairn_http_parser_feed(early->parser, conn->input,
                                                                             (size_t)got, &used);
        if (status == CAIRN_HTTP_PARSE_ERROR)
            return failure(conn, CAIRN_HTTP_ENETWORK, "the response: %s", early->parser->error);
        if (status == CAIRN_HTTP_PARSE_DONE) early->complete = 1;
        else if (got == 0) return failure(conn, CAIRN_HTTP_ENETWORK, "the server closed the connection");
    }
    return CAIRN_HTTP_OK;
}

/* How long a failed send waits for the server's answer: a second at most, and never
 * past the request's deadline. */
static int64_t answer_deadline(int64_t deadline)
{
    int64_t until = now_ms() + 1000;
    return until < deadline ? until : deadline;
}

/* Writes all of data; 0 or a CAIRN_HTTP_E* code with the message set. With `early`, the
 * socket is also watched for an answer while writing waits: once a whole response has
 * come, writing stops there (`early->complete`), and a send the server refused (it
 * answered, then closed) leaves its answer to be read. */
static int write_all(cairn_http_conn_t *conn, const void *data, size_t len, int64_t deadline,
                     const char *what, early_answer *early)
{
    const char *cursor = data;
    while (len > 0 && !(early && early->complete)) {
        ssize_t n;
        short wait = POLLOUT;
        if (conn->tls) {
            n = cairn_http__tls_write(conn->tls, cursor, len, conn->message, sizeof conn->message);
            if (n == CAIRN_TLS_FAILED || n == CAIRN_TLS_REFUSED) {
                int code = n == CAIRN_TLS_REFUSED ? CAIRN_HTTP_ETLS : CAIRN_HTTP_ENETWORK;
                if (early) {
                    /* What the server sent before the write failed says why: an answer,
                     * or a TLS alert (it refused the session and closed). */
                    int said = read_early(conn, early, answer_deadline(deadline));
                    if (said == CAIRN_HTTP_OK && early->complete) break;
                    if (said == CAIRN_HTTP_ETLS) code = CAIRN_HTTP_ETLS;
                }
                return code;
            }
            if (n == CAIRN_TLS_WANT_READ) wait = POLLIN;
        } else {
            n = cairn_http__send(conn->fd, cursor, len);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                int error = errno;
                if (early && read_early(conn, early, answer_deadline(deadline)) == CAIRN_HTTP_OK && early->complete)
                    break;
                return failure(conn, CAIRN_HTTP_ENETWORK, "sending %s: %s", what, CAIRN_HTTP_ERRNO_TEXT(error));
            }
        }
        if (n > 0) {
            cursor += n;
            len -= (size_t)n;
            continue;
        }
        short events = wait | (early && wait == POLLOUT ? POLLIN : 0);
        int64_t left = deadline - now_ms();
        if (left <= 0) return failure(conn, CAIRN_HTTP_ETIMEOUT, "sending %s: timed out", what);
        struct pollfd poller = {.fd = conn->fd, .events = events, .revents = 0};
        int ready = poll(&poller, 1, left > 60000 ? 60000 : (int)left);
        if (ready < 0 && errno != EINTR)
            return failure(conn, CAIRN_HTTP_ENETWORK, "poll: %s", CAIRN_HTTP_ERRNO_TEXT(errno));
        if (ready > 0 && early && (poller.revents & (POLLIN | POLLHUP | POLLERR)) && !(poller.revents & POLLOUT)) {
            /* The server speaks before it has read everything: take what it says. */
            int rc = read_early(conn, early, now_ms());
            if (rc != CAIRN_HTTP_OK) return rc;
        }
    }
    return CAIRN_HTTP_OK;
}

/* Reads what is there, waiting until the deadline: bytes (> 0), 0 at the peer's
 * close, or a negative CAIRN_HTTP_E* code with the message set. */
static ssize_t read_some(cairn_http_conn_t *conn, int64_t deadline, const char *what)
{
    for (;;) {
        ssize_t n;
        short wait = POLLIN;
        if (conn->tls) {
            n = cairn_http__tls_read(conn->tls, conn->input, READ_CHUNK, conn->message,
                                     sizeof conn->message);
            if (n >= 0) return n;
            if (n == CAIRN_TLS_FAILED) return CAIRN_HTTP_ENETWORK;
            if (n == CAIRN_TLS_REFUSED) return CAIRN_HTTP_ETLS;
            if (n == CAIRN_TLS_WANT_WRITE) wait = POLLOUT;
        } else {
            n = cairn_http__recv(conn->fd, conn->input, READ_CHUNK);
            if (n >= 0) return n;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return failure(conn, CAIRN_HTTP_ENETWORK, "reading %s: %s", what, CAIRN_HTTP_ERRNO_TEXT(errno));
        }
        int ready = wait_for(conn->fd, wait, deadline);
        if (ready == 0) return failure(conn, CAIRN_HTTP_ETIMEOUT, "reading %s: timed out", what);
        if (ready < 0) return failure(conn, CAIRN_HTTP_ENETWORK, "poll: %s", CAIRN_HTTP_ERRNO_TEXT(errno));
    }
}

/* Whether an idle kept-alive socket is still quiet (no close, no stray bytes). */
static int still_open(cairn_http_conn_t *conn)
{
    struct pollfd poller = {.fd = conn->fd, .events = POLLIN, .revents = 0};
    int ready;
    do {
        ready = poll(&poller, 1, 0);
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) return 1;
    if (ready < 0 || !conn->tls || (poller.revents & (POLLERR | POLLHUP))) return 0;
    /* TLS 1.3 servers may send session tickets after the response: not data. */
    char ignored[MESSAGE_CAP];
    return cairn_http__tls_read(conn->tls, conn->input, READ_CHUNK, ignored, sizeof ignored)
           == CAIRN_TLS_WANT_READ;
}

/* ---- Connecting ---- */

/* Happy Eyeballs (RFC 8305): addresses in getaddrinfo's order, the families
 * interleaved (the first address's family first), and the next attempt started when the
 * ones under way have not connected after NEXT_ADDRESS_MS (or at once when one fails),
 * all of them racing until the first connects or the deadline passes. A collector
 * whose first address black-holes is reached through the next one. */
#define NEXT_ADDRESS_MS 250
#define MAX_ADDRESSES 32
#define MAX_RACING 8

#ifdef CAIRN_HTTP_FUZZ_HOOKS
int (*cairn_http__connect_hook)(const char *host, int port);
#endif

static size_t interleave(struct addrinfo *list, struct addrinfo **out, size_t cap)
{
    struct addrinfo *first[MAX_ADDRESSES], *other[MAX_ADDRESSES];
    size_t firsts = 0, others = 0, n = 0;
    int family = list ? list->ai_family : AF_UNSPEC;
    for (struct addrinfo *a = list; a; a = a->ai_next) {
        if (a->ai_family == family && firsts < MAX_ADDRESSES) first[firsts++] = a;
        else if (a->ai_family != family && others < MAX_ADDRESSES) other[others++] = a;
    }
    for (size_t i = 0; n < cap && (i < firsts || i < others); i++) {
        if (i < firsts && n < cap) out[n++] = first[i];
        if (i < others && n < cap) out[n++] = other[i];
    }
    return n;
}

static int connect_tcp(cairn_http_conn_t *conn, const endpoint *e, int64_t deadline, int via_proxy)
{
    char port[8];
    snprintf(port, sizeof port, "%d", e->port);
    struct addrinfo hints, *addresses = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    const char *kind = via_proxy ? "proxy " : "";
#ifdef CAIRN_HTTP_FUZZ_HOOKS
    if (cairn_http__connect_hook) {
        conn->fd = cairn_http__connect_hook(e->host, e->port);
        if (conn->fd >= 0) return CAIRN_HTTP_OK;
        return failure(conn, CAIRN_HTTP_ECONNECT, "connecting to %s%s port %d: %s", kind, e->host, e->port,
                       CAIRN_HTTP_ERRNO_TEXT(errno));
    }
#endif
    int rc = getaddrinfo(e->host, port, &hints, &addresses);
    if (rc != 0) {
        char text[128];
        return failure(conn, CAIRN_HTTP_ECONNECT, "could not resolve %shost %s: %s", kind, e->host,
                       rc == EAI_SYSTEM ? cairn_http__strerror(errno, text, sizeof text) : gai_strerror(rc));
    }
    struct addrinfo *order[MAX_ADDRESSES];
    size_t count = interleave(addresses, order, MAX_ADDRESSES), next = 0;
    struct pollfd racing[MAX_RACING];
    int racers = 0, last_error = ECONNREFUSED, winner = -1;
    int64_t next_start = now_ms();
    for (;;) {
        int64_t now = now_ms();
        if (now >= deadline) break;
        if (next < count && racers < MAX_RACING && (racers == 0 || now >= next_start)) {
            struct addrinfo *a = order[next++];
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
            if (fd < 0) {
                last_error = errno;
                continue;
            }
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                winner = fd;
                break;
            }
            if (errno != EINPROGRESS) {
                last_error = errno;
                close(fd);
                continue;
            }
            racing[racers++] = (struct pollfd){.fd = fd, .events = POLLOUT, .revents = 0};
            next_start = now + NEXT_ADDRESS_MS;
            continue;
        }
        if (racers == 0) break; /* every address failed */
        int64_t until = next < count && racers < MAX_RACING && next_start < deadline ? next_start : deadline;
        int64_t left = until - now;
        int ready = poll(racing, (nfds_t)racers, left > 60000 ? 60000 : (int)(left < 0 ? 0 : left));
        if (ready < 0 && errno != EINTR) {
            last_error = errno;
            break;
        }
        for (int i = 0; ready > 0 && i < racers; i++) {
            if (!racing[i].revents) continue;
            int error = 0;
            socklen_t size = sizeof error;
            if (getsockopt(racing[i].fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
            if (error == 0) {
                winner = racing[i].fd;
                racing[i] = racing[--racers];
                break;
            }
            last_error = error;
            close(racing[i].fd);
            racing[i] = racing[--racers];
            i--;
            next_start = now; /* a refusal starts the next address at once */
        }
        if (winner >= 0) break;
    }
    for (int i = 0; i < racers; i++) close(racing[i].fd);
    freeaddrinfo(addresses);
    if (winner >= 0) {
        int on = 1;
        setsockopt(winner, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        setsockopt(winner, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
        conn->fd = winner;
        return CAIRN_HTTP_OK;
    }
    if (now_ms() >= deadline)
        return failure(conn, CAIRN_HTTP_ETIMEOUT, "connecting to %s%s port %d: timed out (%zu of %zu addresses tried)",
                       kind, e->host, e->port, next, count);
    char text[128];
    return failure(conn, CAIRN_HTTP_ECONNECT, "connecting to %s%s port %d: %s", kind, e->host, e->port,
                   cairn_http__strerror(last_error, text, sizeof text));
}

/* Asks the proxy for a tunnel to `to` and reads its answer. */
static int open_tunnel(cairn_http_conn_t *conn, const proxy *via, const endpoint *to, int64_t deadline)
{
    char authority[HOST_CAP + 16];
    char request[sizeof authority * 2 + AUTH_CAP + 96];
    if (format_authority(authority, sizeof authority, to, 1) != 0)
        return failure(conn, CAIRN_HTTP_EINVALID, "the host name is too long");
    int n = snprintf(request, sizeof request, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", authority,
                     authority, via->authorization[0] ? "Proxy-Authorization: " : "", via->authorization,
                     via->authorization[0] ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof request)
        return failure(conn, CAIRN_HTTP_EINVALID, "the proxy request is too long");
    int rc = write_all(conn, request, (size_t)n, deadline, "the CONNECT request", NULL);
    if (rc != CAIRN_HTTP_OK) return rc == CAIRN_HTTP_ENETWORK ? CAIRN_HTTP_ECONNECT : rc;

    cairn_http_parser_t parser;
    cairn_http_parser_init(&parser, conn->headers, CAIRN_HTTP_MAX_HEADER_BYTES, NULL, 0, 1);
    for (;;) {
        ssize_t got = read_some(conn, deadline, "the proxy's answer");
        if (got < 0) return got == CAIRN_HTTP_ENETWORK ? CAIRN_HTTP_ECONNECT : (int)got;
        size_t used = 0;
        cairn_http_parse_status_t status = got == 0 ? cairn_http_parser_finish(&parser)
                                                    : cairn_http_parser_feed(&parser, conn->input,
                                                                             (size_t)got, &used);
        if (status == CAIRN_HTTP_PARSE_ERROR)
            return failure(conn, CAIRN_HTTP_ECONNECT, "the proxy's answer to CONNECT: %s", parser.error);
        if (status == CAIRN_HTTP_PARSE_DONE) {
            if (parser.status < 200 || parser.status > 299)
                return failure(conn, CAIRN_HTTP_ECONNECT, "the proxy refused the tunnel to %s: status %d",
                               authority, parser.status);
            if (used != (size_t)got)
                return failure(conn, CAIRN_HTTP_ECONNECT, "the proxy sent data before the tunnel was used");
            return CAIRN_HTTP_OK;
        }
    }
}

static int start_tls(cairn_http_conn_t *conn, const endpoint *to, int64_t deadline)
{
    conn->tls_sessions++; /* the library's code runs from here on, loading it included */
    void *context = tls_context(conn->client, conn->message, sizeof conn->message);
    if (!context) return CAIRN_HTTP_ETLS;
    conn->tls = cairn_http__tls_session_new(context, conn->fd, to->host, to->is_ip, conn->message,
                                            sizeof conn->message);
    if (!conn->tls) return CAIRN_HTTP_ETLS;
    for (;;) {
        int step = cairn_http__tls_handshake(conn->tls, conn->message, sizeof conn->message);
        if (step == 0) return CAIRN_HTTP_OK;
        if (step == CAIRN_TLS_FAILED || step == CAIRN_TLS_REFUSED) return CAIRN_HTTP_ETLS;
        int ready = wait_for(conn->fd, step == CAIRN_TLS_WANT_READ ? POLLIN : POLLOUT, deadline);
        if (ready == 0) return failure(conn, CAIRN_HTTP_ETIMEOUT, "TLS handshake with %s: timed out", to->host);
        if (ready < 0) return failure(conn, CAIRN_HTTP_ENETWORK, "poll: %s", CAIRN_HTTP_ERRNO_TEXT(errno));
    }
}

static int open_connection(cairn_http_conn_t *conn, const target *t, const proxy *via, int64_t deadline)
{
    int rc = connect_tcp(conn, via ? &via->where : &t->where, deadline, via != NULL);
    if (rc == CAIRN_HTTP_OK && via && t->https) rc = open_tunnel(conn, via, &t->where, deadline);
    if (rc == CAIRN_HTTP_OK && t->https) rc = start_tls(conn, &t->where, deadline);
    if (rc != CAIRN_HTTP_OK) disconnect(conn);
    return rc;
}

/* ------------------------------------------------------------------------------ */
/* Requests                                                                          */
/* ------------------------------------------------------------------------------ */

static int same_name(const char *name, size_t len, const char *lower)
{
    return strlen(lower) == len && strncasecmp(name, lower, len) == 0;
}

static const char *check_request(const cairn_http_request_t *r)
{
    if (!r->method || r->method_len == 0 || r->method_len > 64) return "the method is not an HTTP token";
    for (size_t i = 0; i < r->method_len; i++) {
        if (!cairn_http__is_token((unsigned char)r->method[i])) return "the method is not an HTTP token";
    }
    if (r->header_count > 0 && !r->headers) return "the headers are missing";
    for (size_t h = 0; h < r->header_count; h++) {
        const cairn_http_header_t *header = &r->headers[h];
        if (!header->name || header->name_len == 0) return "a header name is empty";
        for (size_t i = 0; i < header->name_len; i++) {
            if (!cairn_http__is_token((unsigned char)header->name[i])) return "a header name is not an HTTP token";
        }
        if (header->value_len > 0 && !header->value) return "a header value is missing";
        for (size_t i = 0; i < header->value_len; i++) {
            char c = header->value[i];
            if (c == '\r' || c == '\n' || c == 0) return "a header value contains CR, LF or NUL";
        }
    }
    if (r->body_len > 0 && !r->body && !r->body_piece) return "the body is missing";
    return NULL;
}

/* Appends to a growing head buffer; -1 when memory runs out. */
typedef struct head {
    char *bytes;
    size_t len, cap;
} head;

static int append(head *h, const char *bytes, size_t len)
{
    if (h->len + len > h->cap) {
        size_t cap = h->cap ? h->cap : 1024;
        while (cap < h->len + len) cap *= 2;
        char *grown = realloc(h->bytes, cap);
        if (!grown) return -1;
        h->bytes = grown;
        h->cap = cap;
    }
    memcpy(h->bytes + h->len, bytes, len);
    h->len += len;
    return 0;
}

static int append_text(head *h, const char *text)
{
    return append(h, text, strlen(text));
}

/* The request line and headers. `absolute` gives the absolute-form target (http via
 * a proxy). Sets *closes when the caller asked for Connection: close. */
static int build_head(head *h, const cairn_http_request_t *r, const target *t, const proxy *via,
                      int absolute, int *closes)
{
    char authority[HOST_CAP + 16], number[32];
    int default_port = t->where.port == (t->https ? 443 : 80);
    if (format_authority(authority, sizeof authority, &t->where, !default_port) != 0) return -1;
    int has_host = 0;
    *closes = 0;
    for (size_t i = 0; i < r->header_count; i++) {
        const cairn_http_header_t *header = &r->headers[i];
        if (same_name(header->name, header->name_len, "host")) has_host = 1;
        if (same_name(header->name, header->name_len, "connection")) {
            for (size_t k = 0; k + 5 <= header->value_len; k++) {
                if (strncasecmp(header->value + k, "close", 5) == 0) *closes = 1;
            }
        }
    }
    int failed = append(h, r->method, r->method_len) || append_text(h, " ");
    if (absolute) failed = failed || append_text(h, "http://") || append_text(h, authority);
    if (t->path && t->path[0] == '/') failed = failed || append(h, t->path, t->path_len);
    else failed = failed || append_text(h, "/") || (t->path && append(h, t->path, t->path_len));
    failed = failed || append_text(h, " HTTP/1.1\r\n");
    if (!has_host) failed = failed || append_text(h, "Host: ") || append_text(h, authority) || append_text(h, "\r\n");
    for (size_t i = 0; i < r->header_count; i++) {
        const cairn_http_header_t *header = &r->headers[i];
        if (same_name(header->name, header->name_len, "content-length")
            || same_name(header->name, header->name_len, "transfer-encoding"))
            continue;
        failed = failed || append(h, header->name, header->name_len) || append_text(h, ":")
                 || (header->value_len > 0 && (append_text(h, " ") || append(h, header->value, header->value_len)))
                 || append_text(h, "\r\n");
    }
    if (absolute && via->authorization[0])
        failed = failed || append_text(h, "Proxy-Authorization: ") || append_text(h, via->authorization)
                 || append_text(h, "\r\n");
    int bodiless = same_name(r->method, r->method_len, "get") || same_name(r->method, r->method_len, "head");
    if (r->body_len > 0 || !bodiless) {
        snprintf(number, sizeof number, "%zu", r->body_len);
        failed = failed || append_text(h, "Content-Length: ") || append_text(h, number) || append_text(h, "\r\n");
    }
    failed = failed || append_text(h, "\r\n");
    return failed ? -1 : 0;
}

/* Sends the head and body on the open connection and reads the final response. */
static int exchange(cairn_http_conn_t *conn, const head *h, const cairn_http_request_t *r,
                    cairn_http_parser_t *parser, int64_t deadline)
{
    int no_body = same_name(r->method, r->method_len, "head");
    cairn_http_parser_init(parser, conn->headers, CAIRN_HTTP_MAX_HEADER_BYTES, conn->body,
                           conn->client->max_body_bytes, no_body);
    early_answer early = {parser, 0};
    int rc = write_all(conn, h->bytes, h->len, deadline, "the request", &early);
    if (rc == CAIRN_HTTP_OK && r->body_len > 0 && !early.complete && !r->body_piece)
        rc = write_all(conn, r->body, r->body_len, deadline, "the request body", &early);
    /* A body given piece by piece: each piece written whole before the next is asked. */
    for (size_t sent = 0; rc == CAIRN_HTTP_OK && r->body_piece && sent < r->body_len && !early.complete;) {
        const void *piece = NULL;
        size_t n = r->body_piece(r->body_context, sent, &piece);
        if (n == 0 || n > r->body_len - sent || !piece) {
            /* The socket holds part of a request: it cannot carry another. */
            parser->keep_alive = 0;
            return failure(conn, CAIRN_HTTP_EINVALID, "the request body could not be read at byte %zu", sent);
        }
        rc = write_all(conn, piece, n, deadline, "the request body", &early);
        sent += n;
    }
    if (rc != CAIRN_HTTP_OK) return rc;
    if (early.complete) {
        /* Answered before the body was all sent: the socket is out of step. */
        parser->keep_alive = 0;
        return CAIRN_HTTP_OK;
    }
    for (;;) {
        ssize_t got = read_some(conn, deadline, "the response");
        if (got < 0) return (int)got;
        size_t used = 0;
        cairn_http_parse_status_t status = got == 0
                                               ? cairn_http_parser_finish(parser)
                                               : cairn_http_parser_feed(parser, conn->input, (size_t)got, &used);
        if (status == CAIRN_HTTP_PARSE_ERROR)
            return failure(conn, CAIRN_HTTP_ENETWORK, "the response: %s", parser->error);
        if (status == CAIRN_HTTP_PARSE_DONE) {
            /* Bytes after the response were not asked for: the socket is out of step. */
            if (got > 0 && used != (size_t)got) parser->keep_alive = 0;
            return CAIRN_HTTP_OK;
        }
    }
}

int cairn_http_conn_send(cairn_http_conn_t *conn, const cairn_http_request_t *request,
                         cairn_http_response_t *response)
{
    conn->message[0] = 0;
    memset(response, 0, sizeof *response);
    const char *problem = check_request(request);
    target t;
    if (problem || !request->url) {
        return failure(conn, CAIRN_HTTP_EINVALID, "%s", problem ? problem : "the URL is missing");
    }
    if (parse_url(request->url, request->url_len, &t, &problem) != 0)
        return failure(conn, CAIRN_HTTP_EINVALID, "%s", problem);
    cairn_http_client_t *client = conn->client;
    const proxy_variable *variable = proxy_for(client, &t);
    if (variable && variable->problem[0]) return failure(conn, CAIRN_HTTP_EINVALID, "%s", variable->problem);
    const proxy *via = variable ? &variable->p : NULL;

    int64_t start = now_ms();
    int64_t timeout = request->timeout_ms < 1 ? 1 : request->timeout_ms;
    int64_t connect_timeout = request->connect_timeout_ms < 1 ? 1 : request->connect_timeout_ms;
    int64_t deadline = start + timeout;
    int64_t connect_deadline = connect_timeout < timeout ? start + connect_timeout : deadline;

    char destination[sizeof conn->destination];
    snprintf(destination, sizeof destination, "%s|%s|%d|%s|%d", t.https ? "https" : "http", t.where.host,
             t.where.port, via ? via->where.host : "", via ? via->where.port : 0);

    head h = {NULL, 0, 0};
    int closes = 0;
    if (build_head(&h, request, &t, via, via && !t.https, &closes) != 0) {
        free(h.bytes);
        return failure(conn, CAIRN_HTTP_ENOMEM, "out of memory building the request");
    }

    cairn_http_parser_t parser;
    int rc = CAIRN_HTTP_ENETWORK;
    unsigned sessions = conn->tls_sessions;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = conn->fd >= 0 && conn->reusable && strcmp(conn->destination, destination) == 0
                     && still_open(conn);
        if (!reused) {
            disconnect(conn);
            rc = open_connection(conn, &t, via, connect_deadline);
            if (rc != CAIRN_HTTP_OK) break;
            snprintf(conn->destination, sizeof conn->destination, "%s", destination);
        }
        rc = exchange(conn, &h, request, &parser, deadline);
        if (rc == CAIRN_HTTP_OK) break;
        disconnect(conn);
        /* A kept-alive connection the server closed meanwhile: once more, fresh. */
        if (!(reused && rc == CAIRN_HTTP_ENETWORK && !cairn_http_parser_started(&parser))) break;
    }
    free(h.bytes);
    /* The code a TLS setup ran (loading the library, the first context, handshakes)
     * need not stay in the process: unmapped after the exchange, at most once a second,
     * and once more at a send 2 s or more later (what came back by then is split). */
    if (conn->tls_sessions != sessions) cairn_http__tls_connection_used();
    if (t.https) cairn_http__tls_release_if_due(now_ms());
    if (rc != CAIRN_HTTP_OK) return rc;

    conn->reusable = parser.keep_alive && !parser.abandoned && !closes;
    if (!conn->reusable) disconnect(conn);
    /* What went wrong on the way (a reused socket found closed, a partial early answer
     * whose rest was not there yet) is not the send's error. */
    conn->message[0] = 0;
    response->status = parser.status;
    response->headers = conn->headers;
    response->headers_len = parser.headers_len;
    response->header_count = parser.header_count;
    response->body = conn->body;
    response->body_len = parser.body_len;
    response->body_truncated = parser.body_truncated;
    return CAIRN_HTTP_OK;
}
