//! The stream API of the worker (the protocol is in `crate::stream`).

use super::{posted, Imm, Worker};
use crate::core::cq::CqOp;
use crate::core::ep::Ep;
use crate::core::request::*;
use crate::stream::{self, StreamRecv};
use ucs::{Result, Status};

impl Worker {
    /// Sends `buf` on `ep`'s stream. `None`: complete.
    pub fn stream_send_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        // The common case first, with one look at the endpoint: bytes that go in the call
        // on a connected endpoint with nothing queued, reported by no queue.
        let mut tried = None;
        if Callback::droppable(&cb) {
            if let (Some(lane), Some(all)) = (self.core.ready_lane(ep), buf.as_bytes()) {
                let (tls, core, st) = (&mut self.tls, &mut self.core, &mut self.p.stream);
                let sent = stream::send_in_call(tls, core, st, lane, all)?;
                if sent == all.len() {
                    Callback::drop_uncalled(cb);
                    return Ok(None);
                }
                tried = Some(sent);
            }
        }
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::StreamSend)?;
        let imm = Imm {
            length: buf.len(),
            tag: 0,
        };
        let post = stream::send_nb(
            &mut self.tls,
            &mut self.core,
            &mut self.p.stream,
            ep.0,
            buf,
            cb,
            tried,
        )?;
        posted(&mut self.tls, &mut self.core, ep.0, post, false, imm)
    }

    /// Receives from `ep`'s stream into `buf`: with `waitall`, exactly `buf.len()` bytes;
    /// otherwise whatever is there (at least one byte).
    pub fn stream_recv_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        waitall: bool,
        mut cb: Option<Callback>,
    ) -> Result<StreamRecv> {
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::StreamRecv)?;
        stream::recv_nb(&mut self.core, &mut self.p.stream, ep.0, buf, waitall, cb)
    }

    /// Takes whatever stream bytes `ep` has received (in one piece as they arrived), if
    /// any; no receive buffer involved.
    pub fn stream_recv_data(&mut self, ep: Ep) -> Result<Option<Vec<u8>>> {
        self.core.check(ep)?;
        self.core.ep(ep.0)?;
        Ok(stream::recv_data(&mut self.p.stream, ep.0))
    }

    /// Up to `max` endpoints whose stream has received bytes not yet consumed (after
    /// progressing the worker once). An endpoint stays listed until its bytes are read.
    pub fn stream_ready(&mut self, max: usize) -> Vec<Ep> {
        self.progress();
        let st = &self.p.stream;
        self.core
            .eps
            .iter()
            .enumerate()
            .filter(|(i, e)| e.as_ref().is_some_and(|e| !e.implicit) && st.has_data(*i as u32))
            .map(|(i, _)| self.core.handle(i as u32))
            .take(max)
            .collect()
    }

    /// Blocking send.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn stream_send(&mut self, ep: Ep, data: &[u8]) -> Result<()> {
        self.core.check(ep)?;
        // SAFETY: `data` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let buf = unsafe { Buf::contig(data.as_ptr().cast_mut(), data.len()) };
        let r = self.stream_send_nb(ep, buf, None)?;
        self.stream_finish(r).map(|_| ())
    }

    /// Blocking receive; returns the byte count.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn stream_recv(&mut self, ep: Ep, buf: &mut [u8], waitall: bool) -> Result<usize> {
        self.core.check(ep)?;
        // SAFETY: as in stream_send.
        let buf = unsafe { Buf::contig(buf.as_mut_ptr(), buf.len()) };
        match self.stream_recv_nb(ep, buf, waitall, None)? {
            StreamRecv::Done(n) => Ok(n),
            StreamRecv::Pending(r) => self.stream_finish(Some(r)),
        }
    }

    fn stream_finish(&mut self, r: Option<Request>) -> Result<usize> {
        let Some(r) = r else { return Ok(0) };
        let (s, info) = self.finish_recv(r)?;
        if s == Status::Ok {
            Ok(info.length)
        } else {
            Err(s)
        }
    }
}
