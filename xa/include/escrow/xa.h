/* The X/Open XA interface (XO/CAE/91/300) as Escrow implements it: the XID, the switch a
 * transaction manager loads (xa_switch_t), and every flag and return code with the values of the
 * specification, so that a manager compiled against any other xa.h can load escrow_xa_switch.
 * Plain C; usable from C and C++.
 *
 * For code without a transaction manager's xa.h, or next to one, in either order: there is only
 * ever one set of declarations, and it is the specification's.
 * - A TM's xa.h included first defines XIDDATASIZE (every conforming one does): this header then
 *   defines nothing.
 * - Included first, this header also defines XA_H, the include guard of the specification's xa.h
 *   and of those written from it (LIXA's): such a TM's xa.h included afterwards defines nothing.
 *   A TM's xa.h with another guard clashes when it comes second: include it first. A TM's xa.h
 *   that steps aside leaves out what it adds to the specification (LIXA's lixa_get_xa_switch_f),
 *   so code that needs that includes the TM's first too.
 * The struct layouts, entry-point types and values are the same in both, so a TM compiled with
 * its own xa.h loads a switch compiled with this one (tests/xa_switch/header_order_xa.inc checks
 * all of it). escrow/xa_switch.h needs neither header (it compiles in any order). */
#ifndef ESCROW_XA_H
#define ESCROW_XA_H

#ifndef XIDDATASIZE /* else a transaction manager's xa.h came first: its declarations stand */

#ifndef XA_H
#define XA_H /* the specification's xa.h guard: a TM's xa.h included after this one defines nothing */
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define XIDDATASIZE 128 /* size in bytes of the gtrid and bqual together */
#define MAXGTRIDSIZE 64 /* longest global transaction id */
#define MAXBQUALSIZE 64 /* longest branch qualifier */

struct xid_t {
  long formatID; /* -1 means the null XID */
  long gtrid_length;
  long bqual_length;
  char data[XIDDATASIZE]; /* gtrid first, bqual right after it */
};
typedef struct xid_t XID;

#define RMNAMESZ 32     /* length of a resource manager's name, with its NUL */
#define MAXINFOSIZE 256 /* longest open or close string, with its NUL */

struct xa_switch_t {
  char name[RMNAMESZ];
  long flags;   /* TMREGISTER, TMNOMIGRATE, TMUSEASYNC */
  long version; /* 0 */
  int (*xa_open_entry)(char *info, int rmid, long flags);
  int (*xa_close_entry)(char *info, int rmid, long flags);
  int (*xa_start_entry)(XID *xid, int rmid, long flags);
  int (*xa_end_entry)(XID *xid, int rmid, long flags);
  int (*xa_rollback_entry)(XID *xid, int rmid, long flags);
  int (*xa_prepare_entry)(XID *xid, int rmid, long flags);
  int (*xa_commit_entry)(XID *xid, int rmid, long flags);
  int (*xa_recover_entry)(XID *xids, long count, int rmid, long flags);
  int (*xa_forget_entry)(XID *xid, int rmid, long flags);
  int (*xa_complete_entry)(int *handle, int *retval, int rmid, long flags);
};

/* Switch flags. */
#define TMNOFLAGS 0x00000000L
#define TMREGISTER 0x00000001L
#define TMNOMIGRATE 0x00000002L
#define TMUSEASYNC 0x00000004L

/* Call flags. */
#define TMASYNC 0x80000000L
#define TMONEPHASE 0x40000000L
#define TMFAIL 0x20000000L
#define TMNOWAIT 0x10000000L
#define TMRESUME 0x08000000L
#define TMSUCCESS 0x04000000L
#define TMSUSPEND 0x02000000L
#define TMSTARTRSCAN 0x01000000L
#define TMENDRSCAN 0x00800000L
#define TMMULTIPLE 0x00400000L
#define TMJOIN 0x00200000L
#define TMMIGRATE 0x00100000L

/* Dynamic registration: the routines by which a resource manager calls the manager (it exports
 * them; Escrow's switch calls neither), and their return codes. */
extern int ax_reg(int rmid, XID *xid, long flags);
extern int ax_unreg(int rmid, long flags);
#define TM_JOIN 2
#define TM_RESUME 1
#define TM_OK 0
#define TMER_TMERR (-1)
#define TMER_INVAL (-2)
#define TMER_PROTO (-3)

/* Return codes: the rollback range. */
#define XA_RBBASE 100
#define XA_RBROLLBACK XA_RBBASE
#define XA_RBCOMMFAIL (XA_RBBASE + 1)
#define XA_RBDEADLOCK (XA_RBBASE + 2)
#define XA_RBINTEGRITY (XA_RBBASE + 3)
#define XA_RBOTHER (XA_RBBASE + 4)
#define XA_RBPROTO (XA_RBBASE + 5)
#define XA_RBTIMEOUT (XA_RBBASE + 6)
#define XA_RBTRANSIENT (XA_RBBASE + 7)
#define XA_RBEND XA_RBTRANSIENT

#define XA_NOMIGRATE 9
#define XA_HEURHAZ 8
#define XA_HEURCOM 7
#define XA_HEURRB 6
#define XA_HEURMIX 5
#define XA_RETRY 4
#define XA_RDONLY 3
#define XA_OK 0

#define XAER_ASYNC (-2)
#define XAER_RMERR (-3)
#define XAER_NOTA (-4)
#define XAER_INVAL (-5)
#define XAER_PROTO (-6)
#define XAER_RMFAIL (-7)
#define XAER_DUPID (-8)
#define XAER_OUTSIDE (-9)

#ifdef __cplusplus
}
#endif

#endif /* XIDDATASIZE */

#endif /* ESCROW_XA_H */
