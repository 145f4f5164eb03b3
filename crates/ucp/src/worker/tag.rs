//! The tag API of the worker (the protocol is in `crate::tag`).

use super::{posted, Imm, Worker};
use crate::core::cq::CqOp;
use crate::core::ep::Ep;
use crate::core::request::*;
use crate::engine;
use crate::matcher::FULL_MASK;
use crate::tag::{self, Message, RecvPosted, RecvTicket, WordRecv};
use std::time::Duration;
use ucs::{Result, Status};

/// How long the blocking conveniences wait before they give up.
pub(crate) const BLOCKING_TIMEOUT: Duration = Duration::from_secs(120);

impl Worker {
    /// Sends `buf` with `tag` on `ep`. Returns `None` when the send completed in the call
    /// (the callback is then not called), else a request.
    #[inline(always)]
    pub fn tag_send_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        tag: u64,
        sync: bool,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        // The common case first, with one look at the endpoint: a whole message on a
        // connected endpoint with nothing queued, reported by no completion queue.
        let mut tried = false;
        if !sync && Callback::droppable(&cb) {
            if let Some(data) = buf.as_bytes() {
                match self.eager_now(ep, data, tag)? {
                    Some(true) => {
                        Callback::drop_uncalled(cb);
                        return Ok(None);
                    }
                    Some(false) => tried = true,
                    None => {}
                }
            }
        }
        self.tag_send_rest(ep, buf, tag, sync, cb, tried)
    }

    /// The first step of [`Worker::tag_send_nb`] for a contiguous message with no
    /// callback: sends `data` with `tag` on `ep` in the call when the endpoint is connected
    /// with nothing queued and the message goes eagerly in one piece (true). False: nothing
    /// was sent, and the caller goes on with [`Worker::tag_send_declined`]. For callers
    /// that hold the bytes as a slice and would otherwise carry a [`Buf`] through the fast
    /// path (the C ABI's plain sends).
    #[inline(always)]
    pub fn tag_send_now(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<bool> {
        Ok(self.eager_now(ep, data, tag)? == Some(true))
    }

    /// The send of `buf` (the bytes [`Worker::tag_send_now`] just declined) with `tag` on
    /// `ep`, with no callback, as [`Worker::tag_send_nb`] goes on after its own first step:
    /// the eager attempt is not made again.
    #[inline]
    pub fn tag_send_declined(&mut self, ep: Ep, buf: Buf, tag: u64) -> Result<Option<Request>> {
        // Declined on a ready endpoint: the eager attempt was made (and nothing changed
        // since); on another one, none was.
        let tried = self.core.ready_lane(ep).is_some();
        self.tag_send_rest(ep, buf, tag, false, None, tried)
    }

    /// The eager send in the call: `None` when the endpoint is not connected with nothing
    /// queued (nothing tried), else whether the message went.
    #[inline(always)]
    fn eager_now(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<Option<bool>> {
        let Some(lane) = self.core.ready_lane(ep) else {
            return Ok(None);
        };
        let p = &mut self.p.tag;
        tag::send::eager_in_call(&mut self.tls, &mut self.core, p, lane, tag, data).map(Some)
    }

    /// [`Worker::tag_send_nb`] after its eager step (`tried`: made, and declined).
    #[inline(always)]
    fn tag_send_rest(
        &mut self,
        ep: Ep,
        buf: Buf,
        tag: u64,
        sync: bool,
        mut cb: Option<Callback>,
        tried: bool,
    ) -> Result<Option<Request>> {
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::TagSend)?;
        let imm = Imm {
            length: buf.len(),
            tag,
        };
        let post = tag::send::send_nb(
            &mut self.tls,
            &mut self.core,
            &mut self.p.tag,
            ep.0,
            buf,
            tag,
            sync,
            cb,
            tried,
        )?;
        posted(&mut self.tls, &mut self.core, ep.0, post, false, imm)
    }

    /// Posts a receive for a message whose tag matches `tag` under `mask`.
    #[inline]
    pub fn tag_recv_nb(
        &mut self,
        buf: Buf,
        tag: u64,
        mask: u64,
        cb: Option<Callback>,
    ) -> Result<Request> {
        match self.recv_post(buf, tag, mask, cb, false)? {
            RecvPosted::Pending(r) => Ok(r),
            // Not made without `imm`; a finished request keeps the contract all the same.
            RecvPosted::Done(status, info) => Ok(self.core.finished_recv(status, info)),
        }
    }

    /// Posts a receive as [`Worker::tag_recv_nb`] does, but a whole message that is
    /// already here is received in the call: [`RecvPosted::Done`] gives its status and
    /// information, and no request is made (UCX's `ucp_tag_recv_nbx` returning NULL with
    /// its receive information filled in). A callback is then not called; a completion
    /// queue named instead gets its entry.
    #[inline(always)]
    pub fn tag_recv_nbx(
        &mut self,
        buf: Buf,
        tag: u64,
        mask: u64,
        cb: Option<Callback>,
    ) -> Result<RecvPosted> {
        // A whole small message already here, for an exact tag: taken where it lies, with
        // no receive posted (a completion queue's entry goes the full way).
        if mask == FULL_MASK && !buf.is_owned() && Callback::droppable(&cb) {
            if let Some((status, info)) = tag::recv_small_now(&mut self.p.tag, &buf, tag) {
                Callback::drop_uncalled(cb);
                return Ok(RecvPosted::Done(status, info));
            }
        }
        self.recv_post(buf, tag, mask, cb, true)
    }

    /// Receives, in the call and with nothing posted, a whole small message that is
    /// already here for exactly `tag` (full mask): its status and information. `None` when
    /// there is none (or `mask` is not full, or `buf` is owned); nothing changed then. The
    /// first step of [`Worker::tag_recv_nbx`], for callers that post by word otherwise.
    #[inline(always)]
    pub fn tag_recv_small_now(
        &mut self,
        buf: &Buf,
        tag: u64,
        mask: u64,
    ) -> Option<(Status, RecvInfo)> {
        if mask != FULL_MASK || buf.is_owned() {
            return None;
        }
        tag::recv_small_now(&mut self.p.tag, buf, tag)
    }

    /// Posts a receive reported by `word` through [`Worker::drain_completed`], as a request
    /// started with [`Callback::Word`] and released at once would be, but with no request
    /// while it waits: the buffer and the word wait in the matcher, and a whole eager
    /// message completes the receive with no request at all (the C ABI's receives with a
    /// callback take this path). A whole unexpected message that matches is received in
    /// the call ([`WordRecv::Done`], nothing reported by word). Owned buffers, which go
    /// back through a request, are refused (`InvalidParam`).
    #[inline(always)]
    pub fn tag_recv_word(&mut self, buf: Buf, tag: u64, mask: u64, word: u64) -> Result<WordRecv> {
        if buf.is_owned() {
            return Err(Status::InvalidParam);
        }
        let p = &mut self.p;
        let r = tag::recv_word(
            &mut self.core,
            &mut p.tag,
            &mut p.rndv,
            buf,
            tag,
            mask,
            word,
        );
        if !p.idle() {
            self.progress();
        }
        Ok(r)
    }

    /// Cancels a receive posted by [`Worker::tag_recv_word`] that still waits: its word
    /// reports `Canceled` (through [`Worker::drain_completed`]). False when the ticket
    /// names no waiting receive (it matched, or was canceled already).
    pub fn tag_recv_word_cancel(&mut self, t: RecvTicket) -> bool {
        tag::cancel_word(&mut self.core, &mut self.p.tag, t)
    }

    #[inline(always)]
    fn recv_post(
        &mut self,
        buf: Buf,
        tag: u64,
        mask: u64,
        mut cb: Option<Callback>,
        imm: bool,
    ) -> Result<RecvPosted> {
        self.core.stamp(&mut cb, CqOp::TagRecv)?;
        let p = &mut self.p;
        let r = tag::recv_nb(
            &mut self.core,
            &mut p.tag,
            &mut p.rndv,
            buf,
            tag,
            mask,
            cb,
            imm,
        );
        // A match with an unexpected message may have work (an acknowledgement, a
        // rendezvous read) that goes now; a completion's callback waits for progress.
        if !p.idle() {
            self.progress();
        }
        Ok(r)
    }

    /// Looks for an unexpected message matching `tag`/`mask`. With `remove`, the message
    /// is taken out of matching and returned as a [`Message`] for
    /// [`Worker::tag_msg_recv_nb`].
    pub fn tag_probe(
        &mut self,
        tag: u64,
        mask: u64,
        remove: bool,
    ) -> Option<(RecvInfo, Option<Message>)> {
        tag::probe(&mut self.p.tag, tag, mask, remove)
    }

    /// Receives a message taken by a probe with remove.
    pub fn tag_msg_recv_nb(
        &mut self,
        msg: Message,
        buf: Buf,
        mut cb: Option<Callback>,
    ) -> Result<Request> {
        self.core.stamp(&mut cb, CqOp::TagRecv)?;
        let p = &mut self.p;
        let r = tag::msg_recv_nb(&mut self.core, &mut p.tag, &mut p.rndv, msg, buf, cb)?;
        self.progress();
        Ok(r)
    }

    /// Stops a request this call's owner no longer waits for: a queued send is dropped, a
    /// receive leaves matching; both complete with `Canceled`. After this the request
    /// touches its buffer no more.
    ///
    /// `Err(Busy)`: a receive whose sender is still writing into its buffer (a split
    /// rendezvous over shared memory) cannot be stopped; it completes once the sender
    /// finished or its endpoint failed.
    pub fn request_abort(&mut self, r: Request) -> Result<()> {
        engine::abort(&mut self.core, &mut self.p, r)
    }

    /// Aborts `r` for a blocking call that gives up on it, waiting instead while it
    /// cannot be aborted (see [`Worker::request_abort`]): when this returns, nothing
    /// touches the request's buffer any more.
    pub fn abort_for_good(&mut self, r: Request) -> Result<()> {
        loop {
            match self.request_abort(r) {
                Err(Status::Busy) => {
                    let _ = self.wait_done(r, BLOCKING_TIMEOUT);
                }
                other => return other,
            }
        }
    }

    pub(crate) fn block_on(&mut self, r: Option<Request>) -> Result<Status> {
        let Some(r) = r else { return Ok(Status::Ok) };
        match self.wait_request(r, BLOCKING_TIMEOUT) {
            // Whatever ended the wait, the request must not outlive the caller's buffer
            // (the blocking calls lend it a borrowed slice): abort it before returning.
            Err(e) => {
                let _ = self.abort_for_good(r);
                let _ = self.request_free(r);
                Err(e)
            }
            ok => ok,
        }
    }

    /// Sends `data` and waits for completion.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn tag_send(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<()> {
        self.core.check(ep)?;
        // SAFETY: `data` is borrowed for this whole call, and block_on either sees the
        // send complete or aborts it before returning.
        let buf = unsafe { Buf::contig(data.as_ptr().cast_mut(), data.len()) };
        let r = self.tag_send_nb(ep, buf, tag, false, None)?;
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Sends `data` synchronously (complete when the receiver matched it) and waits.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn tag_send_sync(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<()> {
        self.core.check(ep)?;
        // SAFETY: as in tag_send.
        let buf = unsafe { Buf::contig(data.as_ptr().cast_mut(), data.len()) };
        let r = self.tag_send_nb(ep, buf, tag, true, None)?;
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Receives into `buf` and waits. Truncation is `Err(MessageTruncated)`.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn tag_recv(&mut self, buf: &mut [u8], tag: u64, mask: u64) -> Result<RecvInfo> {
        // SAFETY: `buf` is borrowed mutably for this whole call, and the request either
        // completes or is aborted before this returns.
        let buf = unsafe { Buf::contig(buf.as_mut_ptr(), buf.len()) };
        let r = self.posting_lent(|w| w.tag_recv_nb(buf, tag, mask, None))?;
        self.finish_recv(r).and_then(|(s, info)| match s {
            Status::Ok => Ok(info),
            s => Err(s),
        })
    }

    /// Waits for receive `r`, frees it, and returns its status and information.
    pub(crate) fn finish_recv(&mut self, r: Request) -> Result<(Status, RecvInfo)> {
        let status = match self.wait_done(r, BLOCKING_TIMEOUT) {
            // As in block_on: the request must not outlive the caller's buffer.
            Err(e) => {
                let _ = self.abort_for_good(r);
                let _ = self.request_free(r);
                return Err(e);
            }
            Ok(s) => s,
        };
        let info = self.request_info(r)?;
        self.request_free(r)?;
        Ok((status, info))
    }
}
