/*
 * A transaction manager's xa.h, as a TM ships it: written for Escrow's tests from the
 * declarations the X/Open XA specification publishes (XO/CAE/91/300, and /work/shared/XA.md),
 * in the specification's own spelling (its include guard, unparenthesised constants such as
 * XAER_ASYNC -2 and XA_RBBASE+1), not from Escrow's escrow/xa.h. tests/xa_switch/header_order_*
 * include it before escrow/xa_switch.h or escrow/xa.h, after them, alone, or not at all. It has no
 * guard of its own around struct xid_t (LIXA's has one, XID_T_TYPE): only XA_H keeps it from
 * clashing with escrow/xa.h included before it.
 */
#ifndef XA_H
#define XA_H

/* Transaction branch identification: XID and the null XID. */
#define XIDDATASIZE 128  /* size in bytes */
#define MAXGTRIDSIZE 64  /* maximum size in bytes of gtrid */
#define MAXBQUALSIZE 64  /* maximum size in bytes of bqual */

struct xid_t {
  long formatID;      /* format identifier; -1 means the null XID */
  long gtrid_length;  /* value from 1 through 64 */
  long bqual_length;  /* value from 1 through 64 */
  char data[XIDDATASIZE];
};
typedef struct xid_t XID;

/* Declarations of routines by which RMs call TMs. */
extern int ax_reg(int, XID *, long);
extern int ax_unreg(int, long);

/* Declarations of the routines a resource manager's switch points to. */
#define RMNAMESZ 32     /* length of resource manager name, including the null terminator */
#define MAXINFOSIZE 256 /* maximum size in bytes of xa_info strings, including the null terminator */

struct xa_switch_t {
  char name[RMNAMESZ]; /* name of resource manager */
  long flags;          /* resource manager specific options */
  long version;        /* must be 0 */
  int (*xa_open_entry)(char *, int, long);
  int (*xa_close_entry)(char *, int, long);
  int (*xa_start_entry)(XID *, int, long);
  int (*xa_end_entry)(XID *, int, long);
  int (*xa_rollback_entry)(XID *, int, long);
  int (*xa_prepare_entry)(XID *, int, long);
  int (*xa_commit_entry)(XID *, int, long);
  int (*xa_recover_entry)(XID *, long, int, long);
  int (*xa_forget_entry)(XID *, int, long);
  int (*xa_complete_entry)(int *, int *, int, long);
};

/* Flag definitions for the resource manager switch. */
#define TMNOFLAGS 0x00000000L   /* no resource manager features selected */
#define TMREGISTER 0x00000001L  /* resource manager dynamically registers */
#define TMNOMIGRATE 0x00000002L /* resource manager does not support association migration */
#define TMUSEASYNC 0x00000004L  /* resource manager supports asynchronous operations */

/* Flag definitions for xa_ and ax_ routines. */
#define TMASYNC 0x80000000L      /* perform routine asynchronously */
#define TMONEPHASE 0x40000000L   /* caller is using one-phase commit optimisation */
#define TMFAIL 0x20000000L       /* dissociates caller and marks transaction branch rollback-only */
#define TMNOWAIT 0x10000000L     /* return if blocking condition exists */
#define TMRESUME 0x08000000L     /* caller is resuming association with suspended branch */
#define TMSUCCESS 0x04000000L    /* dissociate caller from transaction branch */
#define TMSUSPEND 0x02000000L    /* caller is suspending, not ending, association */
#define TMSTARTRSCAN 0x01000000L /* start a recovery scan */
#define TMENDRSCAN 0x00800000L   /* end a recovery scan */
#define TMMULTIPLE 0x00400000L   /* wait for any asynchronous operation */
#define TMJOIN 0x00200000L       /* caller is joining existing transaction branch */
#define TMMIGRATE 0x00100000L    /* caller intends to perform migration */

/* ax_() return codes (transaction manager reports to resource manager). */
#define TM_JOIN 2
#define TM_RESUME 1
#define TM_OK 0
#define TMER_TMERR -1
#define TMER_INVAL -2
#define TMER_PROTO -3

/* xa_() return codes (resource manager reports to transaction manager). */
#define XA_RBBASE 100
#define XA_RBROLLBACK XA_RBBASE
#define XA_RBCOMMFAIL XA_RBBASE+1
#define XA_RBDEADLOCK XA_RBBASE+2
#define XA_RBINTEGRITY XA_RBBASE+3
#define XA_RBOTHER XA_RBBASE+4
#define XA_RBPROTO XA_RBBASE+5
#define XA_RBTIMEOUT XA_RBBASE+6
#define XA_RBTRANSIENT XA_RBBASE+7
#define XA_RBEND XA_RBTRANSIENT

#define XA_NOMIGRATE 9
#define XA_HEURHAZ 8
#define XA_HEURCOM 7
#define XA_HEURRB 6
#define XA_HEURMIX 5
#define XA_RETRY 4
#define XA_RDONLY 3
#define XA_OK 0
#define XAER_ASYNC -2
#define XAER_RMERR -3
#define XAER_NOTA -4
#define XAER_INVAL -5
#define XAER_PROTO -6
#define XAER_RMFAIL -7
#define XAER_DUPID -8
#define XAER_OUTSIDE -9

#endif /* XA_H */
