/* error.c: descriptions of Cairn's error codes. Static strings only, so that
 * cairn_strerror() may be called from a signal handler. */
#include "cairn_core.h"

#include <errno.h>

const char *cairn_strerror(int err)
{
    switch (err) {
    case CAIRN_OK: return "success";
    case CAIRN_EINVAL: return "invalid argument";
    case CAIRN_EFULL: return "ring buffer full";
    case CAIRN_ETOOBIG: return "record larger than the maximum record size";
    case CAIRN_ELOCKED: return "ring file is owned by another handle";
    case CAIRN_ECORRUPT: return "data is corrupt";
    case CAIRN_ETRUNCATED: return "data is truncated";
    case CAIRN_EVERSION: return "unsupported format version";
    case CAIRN_EBUFSIZE: return "output buffer too small";
    case CAIRN_ELIMIT: return "decoded size exceeds the configured limit";
    case CAIRN_EZSTD: return "zstd error";
    case CAIRN_ENOMEM: return "out of memory";
    case CAIRN_EDICT: return "zstd dictionary missing or mismatched";
    /* The errno values the core can return, described without strerror(3), which is
     * not async-signal-safe. */
    case EPERM: return "operation not permitted";
    case ENOENT: return "no such file or directory";
    case EINTR: return "interrupted system call";
    case EIO: return "input/output error";
    case EBADF: return "bad file descriptor";
    case EAGAIN: return "resource temporarily unavailable";
    case ENOMEM: return "cannot allocate memory";
    case EACCES: return "permission denied";
    case EEXIST: return "file exists";
    case ENOTDIR: return "not a directory";
    case EISDIR: return "is a directory";
    case EINVAL: return "invalid argument (errno)";
    case EMFILE: return "too many open files";
    case EFBIG: return "file too large";
    case ENOSPC: return "no space left on device";
    case EROFS: return "read-only file system";
    case ENAMETOOLONG: return "file name too long";
    case EOPNOTSUPP: return "operation not supported";
    case EDQUOT: return "disk quota exceeded";
    default: return err > 0 ? "system error" : "unknown error";
    }
}

const char *cairn_version(void)
{
    return CAIRN_VERSION_STRING;
}
