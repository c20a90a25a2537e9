/* escrow_xa_switch: the X/Open XA switch a transaction manager (TM) loads to enlist Escrow, and
 * escrow_xa_connection(), which hands the application the connection its branch runs on.
 * libescrow exports both. docs/xa.md is the guide; this header is the reference.
 *
 * The switch is named "escrow"; its flags are TMNOMIGRATE (a branch may not move between threads
 * of control; no asynchronous calls, no dynamic registration: TMREGISTER is not set, ax_reg is
 * never called) and its version is 0.
 *
 * Threads of control. xa_open opens one STOMP connection per (calling thread, rmid); every other
 * entry point and escrow_xa_connection() use the calling thread's connection for that rmid. All
 * per-connection state (association, recover cursor) lives in thread-local storage: no lock is
 * shared between threads, so any number of threads may call the switch at once, each on its own
 * connections. A thread must call xa_open itself before it uses an rmid.
 *
 * Open string (xa_open's info and xa_close's info; at most MAXINFOSIZE - 1 characters):
 *   space-separated key=value pairs, each key at most once, values without spaces:
 *     host=127.0.0.1   broker address (name or IP; default 127.0.0.1)
 *     port=61613       STOMP port (1..65535; default 61613)
 *     login=NAME       CONNECT login (default none)
 *     passcode=SECRET  CONNECT passcode (default none)
 *     timeout=10000    milliseconds to wait for the connection and for each XA answer
 *                      (1..3600000; default 10000)
 *     resource=NAME    the resource's name, its branch identity (1..64 characters; default
 *                      the login, or "default" without one)
 *     branch=NAME      a qualifier, for two rmids of one TM that name the same broker, login and
 *                      resource (1..64 characters; default none)
 *   An empty or NULL string means every default. A bad string answers XAER_INVAL; the reason is
 *   in escrow_xa_last_error().
 *
 * Branch identity. Escrow keeps every branch under (user, xid). A TM passes the same XID to every
 * resource of a transaction, so the switch makes the broker's xid from the TM's XID and the
 * rmid's resource and branch, never from the rmid number: the bqual gets a 5-byte trailer, 0xE6
 * followed by a 32-bit hash of the resource and branch names. Any rmid opened with the same
 * resource and branch finds, decides and recovers the same branches, whatever number the TM
 * gives it. Two rmids of one thread that would make the same trailer for the same broker and
 * login are refused by xa_open (XAER_INVAL): give them different branch= values. Branches
 * prepared by switches before this trailer (0xE5 and the rmid) are still listed by xa_recover on
 * that rmid and decided there. A TM's bqual may be at most MAXBQUALSIZE - 5 = 59 bytes
 * (XAER_INVAL otherwise). docs/xa.md has the details.
 *
 * Results. Every entry point returns only codes the XA specification lists for it (docs/xa.md has
 * the table): the code the broker answered (its `xa-result` header) when the call may return it,
 * or one the switch decides without asking the broker:
 *   XAER_INVAL   a NULL or null XID, an XID the broker cannot take (see above), a flag the call
 *                does not take (TMASYNC is never taken), a bad open string, two rmids of one
 *                identity, a negative count.
 *   XAER_PROTO   the rmid is not open on this thread (xa_open first), or xa_close while this
 *                thread has a branch associated or suspended on the rmid.
 *   XAER_RMFAIL  the connection is gone (broker stopped, network cut), an answer did not come
 *                within the timeout, or the broker's answer cannot be taken (unreadable, or a code
 *                the call may not return). The connection is closed; calls on the rmid keep
 *                answering XAER_RMFAIL until xa_open (or xa_close then xa_open) reopens it. A
 *                branch that was associated when the connection dropped is rollback-only in the
 *                broker; an idle or prepared one waits for the TM.
 *   XAER_RMERR   xa_open cannot open a connection (no broker there, login refused, not an Escrow
 *                broker: xa_open may not answer XAER_RMFAIL, so a TM retries it later), or the
 *                broker closed the connection with an ERROR frame. No exception ever crosses these
 *                entry points.
 * Per call, the codes the broker may answer are listed in docs/transactions.md ("XA frames").
 *
 * XA declarations. This header declares only Escrow's own names, with `struct xa_switch_t`
 * forward-declared: it compiles whether a transaction manager's xa.h was included before it,
 * after it, or not at all. To use the switch's fields or the XA constants, include an xa.h: the
 * TM's, or escrow/xa.h when there is none.
 *
 * Thread safety: every function here may be called from any thread; each works on the calling
 * thread's connections only. */
#ifndef ESCROW_XA_SWITCH_H
#define ESCROW_XA_SWITCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* Defined by any xa.h (the TM's or escrow/xa.h); an incomplete type is enough to declare it. */
struct xa_switch_t;

/* The switch: name "escrow", flags TMNOMIGRATE, version 0. */
extern struct xa_switch_t escrow_xa_switch;

/* A sentence saying why the calling thread's last switch call that did not answer XA_OK failed
 * (and what to do), or "" if none has. The pointer stays valid until the thread's next switch
 * call. */
const char *escrow_xa_last_error(void);

#ifdef __cplusplus
}  // extern "C"

namespace escrow::client {
class connection;
}

/* The calling thread's connection for `rmid`, on which the application sends, receives and
 * acknowledges inside the branch it started with xa_start; nullptr if this thread has not opened
 * the rmid, closed it, or its connection dropped (then xa_open reopens it). The switch owns the
 * connection: do not close it; it lives until xa_close (or until the thread exits). Subscriptions
 * made on it survive xa_start/xa_end but not a reopen. */
escrow::client::connection *escrow_xa_connection(int rmid);

/* The same, for a TM that does not tell the application its rmids (Tuxedo-style managers number
 * their resource managers themselves): the calling thread's connection for the rmid it opened
 * with resource name `resource` (resource=, or the default: the login); NULL or "" means the
 * only rmid this thread opened. nullptr if no rmid, or more than one, matches, or if its
 * connection dropped. */
escrow::client::connection *escrow_xa_connection_for(const char *resource);
#endif

#endif /* ESCROW_XA_SWITCH_H */
