/* Active messages between two processes: handlers set with
 * ucp_worker_set_am_recv_handler, eager messages with and without a user header, data a
 * handler keeps (UCS_INPROGRESS) and releases later, rendezvous messages received with
 * ucp_am_recv_data_nbx inside and after the handler, reply endpoints, and the older
 * ucp_worker_set_am_handler / ucp_am_send_nb pair, and a run of messages of many header
 * and data sizes (empty data included) of which every fifth is kept and checked after all
 * the others arrived (copied, for the small ones that come without the DATA flag).
 * Handlers call back into the library (they run outside its progress). */
#include "common.h"

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

enum { ID_EAGER = 1, ID_KEEP = 2, ID_RNDV = 3, ID_RNDV_LATER = 4, ID_REPLY = 5, ID_OLD = 6,
       ID_ACK = 7, ID_MANY = 8 };

/* The run of ID_MANY messages: message i has a header of 4 + i % 17 bytes (i, then bytes
 * of seed 1000 + i) and (i * 131) % 5000 bytes of data of seed 2000 + i. */
enum { MANY = 300, MANY_KEEP_EVERY = 5 };

static int got[16];
static void *many_kept[MANY];
static size_t many_kept_len[MANY];
static int many_kept_copied[MANY];
static int many_small;
static void *kept_data;
static size_t kept_len;
static void *later_desc;
static size_t later_len;
static char rbuf[4 << 20];
static int rndv_done;

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_AM, &ctx, &worker, &ep);
}

static ucs_status_t wait_op(void *r)
{
    return wait_and_free(worker, r);
}

/* UCX calls the callback of an _nb operation unconditionally: pass one. */
static void empty_send_cb(void *req, ucs_status_t status)
{
    (void)req;
    (void)status;
}

static void rndv_cb(void *req, ucs_status_t status, size_t length, void *user_data)
{
    CHECK_OK(status);
    CHECK(length == (size_t)(uintptr_t)user_data, "rndv length %zu", length);
    rndv_done++;
    (void)req;
}

static ucs_status_t handler(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    int id = (int)(uintptr_t)arg;
    ucp_request_param_t p;
    void *r;
    switch (id) {
    case ID_EAGER:
        CHECK(header_length == 16 && verify(header, 16, 20) == 0, "header");
        CHECK(length == 1000 && verify(data, 1000, 21) == 0, "eager data");
        CHECK(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA, "eager data not flagged DATA");
        break;
    case ID_KEEP:
        CHECK(header_length == 0, "no header expected");
        CHECK(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA, "DATA flag");
        kept_data = data;
        kept_len  = length;
        got[id]++;
        return UCS_INPROGRESS;
    case ID_RNDV:
        /* sent with UCP_AM_SEND_FLAG_RNDV; a transport that cannot read remote memory
         * (tcp) delivers it whole instead: either way ucp_am_recv_data_nbx receives it */
        CHECK(param->recv_attr & (UCP_AM_RECV_ATTR_FLAG_RNDV | UCP_AM_RECV_ATTR_FLAG_DATA),
              "neither RNDV nor DATA");
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv_am   = rndv_cb;
        p.user_data    = (void*)(uintptr_t)length;
        r = ucp_am_recv_data_nbx(worker, data, rbuf, length, &p);
        CHECK(!UCS_PTR_IS_ERR(r), "am_recv_data_nbx");
        if (r == NULL) {
            rndv_done++;
        } else {
            ucp_request_release(r); /* released early: the callback still runs */
        }
        break;
    case ID_RNDV_LATER:
        CHECK(param->recv_attr & (UCP_AM_RECV_ATTR_FLAG_RNDV | UCP_AM_RECV_ATTR_FLAG_DATA),
              "neither RNDV nor DATA");
        later_desc = data;
        later_len  = length;
        got[id]++;
        return UCS_INPROGRESS;
    case ID_REPLY:
        CHECK(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP, "no reply endpoint");
        memset(&p, 0, sizeof(p));
        r = ucp_am_send_nbx(param->reply_ep, ID_ACK, NULL, 0, data, length, &p);
        CHECK_OK(wait_op(r));
        break;
    case ID_ACK:
        CHECK(length == 8 && verify(data, 8, 30) == 0, "reply data");
        break;
    case ID_MANY: {
        uint32_t i;
        CHECK(header_length >= 4, "many: header of %zu bytes", header_length);
        memcpy(&i, header, 4);
        CHECK(i < MANY && header_length == 4 + i % 17, "many: message %u, header %zu", i,
              header_length);
        CHECK(verify((const char*)header + 4, header_length - 4, 1000 + i) == 0,
              "many: header of message %u", i);
        CHECK(length == (i * 131) % 5000 && (length == 0 || verify(data, length, 2000 + i) == 0),
              "many: data of message %u (%zu bytes)", i, length);
        if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
            /* rucx holds a message of up to 56 bytes of data and header inline (as UCX
             * does data in a transport's inline slot): it may not be kept, so a copy is */
            CHECK(length + header_length <= 56, "many: %zu + %zu bytes without DATA flag",
                  length, header_length);
            many_small++;
            if (i % MANY_KEEP_EVERY == 0) {
                many_kept[i] = malloc(length + 1);
                CHECK(many_kept[i] != NULL, "malloc");
                memcpy(many_kept[i], data, length);
                many_kept_len[i]    = length;
                many_kept_copied[i] = 1;
            }
            break;
        }
        if (i % MANY_KEEP_EVERY == 0) {
            many_kept[i]     = data;
            many_kept_len[i] = length;
            got[id]++;
            return UCS_INPROGRESS;
        }
        break;
    }
    }
    got[id]++;
    return UCS_OK;
}

static ucs_status_t old_handler(void *arg, void *data, size_t length, ucp_ep_h reply_ep,
                                unsigned flags)
{
    CHECK(length == 3000 && verify(data, 3000, 40) == 0, "old-style data");
    got[ID_OLD]++;
    (void)arg; (void)reply_ep; (void)flags;
    return UCS_OK;
}

static void set_handlers(void)
{
    ucp_am_handler_param_t hp;
    for (int id = ID_EAGER; id <= ID_MANY; id++) {
        if (id == ID_OLD) {
            CHECK_OK(ucp_worker_set_am_handler(worker, ID_OLD, old_handler, NULL,
                                               UCP_AM_FLAG_WHOLE_MSG));
            continue;
        }
        memset(&hp, 0, sizeof(hp));
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
        hp.id    = id;
        hp.cb    = handler;
        hp.arg   = (void*)(uintptr_t)id;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
        CHECK_OK(ucp_worker_set_am_recv_handler(worker, &hp));
    }
}

static int receiver(int fd)
{
    ucp_request_param_t p;
    void *r;
    setup(fd);
    set_handlers();
    barrier(fd);
    while (got[ID_EAGER] < 1 || got[ID_KEEP] < 1 || rndv_done < 1 || got[ID_RNDV_LATER] < 1 ||
           got[ID_REPLY] < 1 || got[ID_OLD] < 1 || got[ID_MANY] < MANY) {
        ucp_worker_progress(worker);
    }
    /* the kept ones of the run are intact after every later message came and went */
    for (uint32_t i = 0; i < MANY; i += MANY_KEEP_EVERY) {
        CHECK(many_kept_len[i] == (i * 131) % 5000 &&
              (many_kept_len[i] == 0 || verify(many_kept[i], many_kept_len[i], 2000 + i) == 0),
              "many: kept data of message %u", i);
        if (many_kept_copied[i]) {
            free(many_kept[i]);
        } else {
            ucp_am_data_release(worker, many_kept[i]);
        }
    }
    /* the run has small messages (message 0: no data, a 4-byte header) */
    CHECK(many_small > 0, "many: no small message came without the DATA flag");
    /* kept eager data is still there after the handler returned */
    CHECK(kept_len == 4000 && verify(kept_data, 4000, 22) == 0, "kept data");
    ucp_am_data_release(worker, kept_data);
    /* rendezvous data received after the handler */
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am   = rndv_cb;
    p.user_data    = (void*)(uintptr_t)later_len;
    memset(rbuf, 0, later_len);
    r = ucp_am_recv_data_nbx(worker, later_desc, rbuf, later_len, &p);
    CHECK_OK(wait_op(r));
    CHECK(later_len == (2 << 20) && verify(rbuf, later_len, 24) == 0, "late rendezvous data");
    barrier(fd);
    barrier(fd);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("[%d] am receiver passed\n", (int)getpid());
    return 0;
}

static int sender(int fd)
{
    char *buf = malloc(4 << 20), *buf2 = malloc(2 << 20), hdr[16];
    void *later;
    ucp_request_param_t p;
    ucp_worker_attr_t wa;
    setup(fd);
    set_handlers();
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    CHECK_OK(ucp_worker_query(worker, &wa));
    CHECK(wa.max_am_header >= 16, "max_am_header %zu", wa.max_am_header);
    barrier(fd);
    memset(&p, 0, sizeof(p));
    fill(hdr, 16, 20);
    fill(buf, 1000, 21);
    CHECK_OK(wait_op(ucp_am_send_nbx(ep, ID_EAGER, hdr, 16, buf, 1000, &p)));
    fill(buf, 4000, 22);
    CHECK_OK(wait_op(ucp_am_send_nbx(ep, ID_KEEP, NULL, 0, buf, 4000, &p)));
    fill(buf, 3 << 20, 23);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = UCP_AM_SEND_FLAG_RNDV;
    CHECK_OK(wait_op(ucp_am_send_nbx(ep, ID_RNDV, NULL, 0, buf, 3 << 20, &p)));
    /* the receiver keeps this one and receives it after everything else arrived, so
     * the send completes only then */
    fill(buf2, 2 << 20, 24);
    later = ucp_am_send_nbx(ep, ID_RNDV_LATER, NULL, 0, buf2, 2 << 20, &p);
    CHECK(!UCS_PTR_IS_ERR(later), "rendezvous send");
    p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    fill(buf, 8, 30);
    CHECK_OK(wait_op(ucp_am_send_nbx(ep, ID_REPLY, NULL, 0, buf, 8, &p)));
    fill(buf, 3000, 40);
    CHECK_OK(wait_op(ucp_am_send_nb(ep, ID_OLD, buf, 3000, ucp_dt_make_contig(1), empty_send_cb, 0)));
    memset(&p, 0, sizeof(p));
    for (uint32_t i = 0; i < MANY; i++) {
        char mh[4 + 17];
        size_t dlen = (i * 131) % 5000;
        memcpy(mh, &i, 4);
        fill(mh + 4, i % 17, 1000 + i);
        fill(buf, dlen, 2000 + i);
        CHECK_OK(wait_op(ucp_am_send_nbx(ep, ID_MANY, mh, 4 + i % 17, buf, dlen, &p)));
    }
    while (got[ID_ACK] < 1) {
        ucp_worker_progress(worker);
    }
    CHECK_OK(wait_op(later));
    barrier(fd);
    barrier(fd);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(buf);
    free(buf2);
    printf("[%d] am sender passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(sender, receiver);
}
