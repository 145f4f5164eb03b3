//! The active-message API of the worker (the protocol is in `crate::am`).

use super::{posted, Imm, Worker};
use crate::am::{self, AmDesc, AmHandler, AmSendFlags, Handler};
use crate::core::cq::Cq;
use crate::core::cq::CqOp;
use crate::core::ep::Ep;
use crate::core::request::*;
use crate::proto::select::am_proto;
use ucs::{Result, Status};

impl Worker {
    /// Installs (or with `None` removes) the handler of active-message id `id`.
    pub fn am_set_handler(&mut self, id: u16, h: Option<AmHandler>) {
        self.p.am.set_handler(id, h.map(Handler::Fn));
    }

    /// Reports the arrivals of active-message id `id` into `cq` as entries with the
    /// context `user` (replacing any handler of that id; `am_set_handler(id, None)`
    /// removes it). An eager message's header and data are in the entry's
    /// [`crate::AmPayload`]; a rendezvous message's payload holds its header and the
    /// descriptor to pull the data with [`Worker::am_recv_data_nb`] (or to drop it with
    /// [`Worker::am_data_release`]).
    pub fn am_set_handler_cq(&mut self, id: u16, cq: &Cq, user: u64) {
        self.p
            .am
            .set_handler(id, Some(Handler::Cq(cq.clone(), user)));
    }

    /// Sends active message `id` with `header` (copied if the send is queued) and `data`.
    /// `None`: complete.
    #[inline(always)]
    pub fn am_send_nb(
        &mut self,
        ep: Ep,
        id: u16,
        header: &[u8],
        data: Buf,
        flags: AmSendFlags,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        // The common case first, with one look at the endpoint: a message that goes in
        // the call on a connected endpoint with nothing queued, reported by no queue.
        let mut tried = false;
        let both = flags.eager && flags.rndv;
        if !both && Callback::droppable(&cb) {
            if let Some(lane) = self.core.ready_lane(ep) {
                let proto = am_proto(&self.tls[lane.tl].th, header.len(), &data, flags)?;
                let (tls, core, st) = (&mut self.tls, &mut self.core, &mut self.p.am);
                if am::send_in_call(tls, core, st, lane, proto, id, header, &data, flags)? {
                    Callback::drop_uncalled(cb);
                    return Ok(None);
                }
                tried = true;
            }
        }
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::AmSend)?;
        let imm = Imm {
            length: data.len(),
            tag: 0,
        };
        let post = am::send_nb(
            &mut self.tls,
            &mut self.core,
            &mut self.p.am,
            ep.0,
            id,
            header,
            data,
            flags,
            cb,
            tried,
        )?;
        posted(&mut self.tls, &mut self.core, ep.0, post, false, imm)
    }

    /// Sends and waits for completion.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn am_send(
        &mut self,
        ep: Ep,
        id: u16,
        header: &[u8],
        data: &[u8],
        flags: AmSendFlags,
    ) -> Result<()> {
        self.core.check(ep)?;
        // SAFETY: `data` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let buf = unsafe { Buf::contig(data.as_ptr().cast_mut(), data.len()) };
        let r = self.am_send_nb(ep, id, header, buf, flags, None)?;
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// The data a handler kept (eager messages).
    pub fn am_data(&self, desc: AmDesc) -> Option<&[u8]> {
        self.p.am.data(desc)
    }

    /// Keeps bytes a layer above copied out of an eager message's handler, as if the
    /// handler had returned [`crate::AmAction::Keep`]: they are then available under the
    /// returned descriptor to [`Worker::am_data`], [`Worker::am_data_release`] and
    /// [`Worker::am_recv_data_nb`]. The buffer does not move, so a pointer into it that
    /// the layer above handed out stays valid until the release.
    pub fn am_keep(&mut self, data: Vec<u8>) -> AmDesc {
        self.p.am.keep(data)
    }

    /// Releases kept data. For a kept rendezvous message that will not be received, the
    /// sender is told it is done.
    pub fn am_data_release(&mut self, desc: AmDesc) -> Result<()> {
        let p = &mut self.p;
        p.am.data_release(&mut p.rndv, desc)
    }

    /// Pulls the data of a kept rendezvous message into `buf` (or copies kept eager
    /// data). Completes with `MessageTruncated` when `buf` is too small.
    pub fn am_recv_data_nb(
        &mut self,
        desc: AmDesc,
        buf: Buf,
        mut cb: Option<Callback>,
    ) -> Result<Request> {
        self.core.stamp(&mut cb, CqOp::AmRecvData)?;
        let p = &mut self.p;
        let r = am::recv_data_nb(&mut self.core, &mut p.am, &mut p.rndv, desc, buf, cb)?;
        self.progress();
        Ok(r)
    }

    /// Blocking `am_recv_data_nb`; returns the message length.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn am_recv_data(&mut self, desc: AmDesc, buf: &mut [u8]) -> Result<usize> {
        // SAFETY: `buf` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let buf = unsafe { Buf::contig(buf.as_mut_ptr(), buf.len()) };
        let r = self.posting_lent(|w| w.am_recv_data_nb(desc, buf, None))?;
        let (s, info) = self.finish_recv(r)?;
        if s == Status::Ok {
            Ok(info.length)
        } else {
            Err(s)
        }
    }
}
