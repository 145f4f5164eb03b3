//! The owned-buffer API: nonblocking calls on a `Vec<u8>` that moves into the request
//! and comes back when the request is taken ([`Worker::request_take_owned`]), or at once
//! when the operation completed in the call. (The calls that take a [`Buf`] are as safe;
//! these only spare the caller the `Buf` and give the vector back.)

use super::Worker;
use crate::am::AmSendFlags;
use crate::core::buf::Lent;
use crate::core::ep::Ep;
use crate::core::request::*;
use crate::stream::StreamRecv;
use ucs::{Result, Status};

/// Outcome of a send of an owned buffer.
#[derive(Debug)]
pub enum Sent {
    /// Completed in the call: the buffer is back.
    Done(Vec<u8>),
    /// In progress: [`Worker::request_take_owned`] gives the buffer back once done.
    Pending(Request),
}

/// What [`Worker::request_take_owned`] returns for a completed request.
#[derive(Debug)]
pub struct Taken {
    pub status: Status,
    pub info: RecvInfo,
    /// The buffer the request owned (with the received bytes, for a receive).
    pub buf: Vec<u8>,
}

impl Worker {
    /// What a send of lent memory left: the vector back if the request that took it is
    /// gone (completed in the call), else the request (which owns the memory now).
    fn sent(r: Option<Request>, lent: Lent) -> Sent {
        match (r, lent.take()) {
            (None, Ok(v)) => Sent::Done(v),
            (Some(r), _) => Sent::Pending(r),
            // Completed in the call, yet the memory is held elsewhere: cannot happen
            // (only the request held it); report it done with nothing to give back.
            (None, Err(_)) => Sent::Done(Vec::new()),
        }
    }

    /// Sends `data` with `tag` on `ep`; the buffer comes back when the send is done.
    pub fn tag_send_owned(&mut self, ep: Ep, data: Vec<u8>, tag: u64, sync: bool) -> Result<Sent> {
        let (buf, lent) = Buf::lend(data);
        let r = self.tag_send_nb(ep, buf, tag, sync, None)?;
        Ok(Self::sent(r, lent))
    }

    /// Posts a receive into `buf` (its length is the most the receive takes).
    pub fn tag_recv_owned(&mut self, buf: Vec<u8>, tag: u64, mask: u64) -> Result<Request> {
        self.tag_recv_nb(Buf::from(buf), tag, mask, None)
    }

    /// Sends active message `id` with `header` and `data`.
    pub fn am_send_owned(
        &mut self,
        ep: Ep,
        id: u16,
        header: &[u8],
        data: Vec<u8>,
        flags: AmSendFlags,
    ) -> Result<Sent> {
        let (buf, lent) = Buf::lend(data);
        let r = self.am_send_nb(ep, id, header, buf, flags, None)?;
        Ok(Self::sent(r, lent))
    }

    /// Sends `data` on `ep`'s stream.
    pub fn stream_send_owned(&mut self, ep: Ep, data: Vec<u8>) -> Result<Sent> {
        let (buf, lent) = Buf::lend(data);
        let r = self.stream_send_nb(ep, buf, None)?;
        Ok(Self::sent(r, lent))
    }

    /// Receives from `ep`'s stream into `buf` (with `waitall`, exactly `buf.len()`
    /// bytes). `Ok(Err(buf))`: completed in the call, `buf` holds the bytes (truncated to
    /// their count); `Ok(Ok(r))`: in progress.
    pub fn stream_recv_owned(
        &mut self,
        ep: Ep,
        buf: Vec<u8>,
        waitall: bool,
    ) -> Result<std::result::Result<Request, Vec<u8>>> {
        let (b, lent) = Buf::lend(buf);
        match self.stream_recv_nb(ep, b, waitall, None)? {
            StreamRecv::Done(n) => {
                let mut v = lent.take().unwrap_or_default();
                v.truncate(n);
                Ok(Err(v))
            }
            StreamRecv::Pending(r) => Ok(Ok(r)),
        }
    }

    /// If `r` (started by an owned-buffer call) completed: its status, receive
    /// information and buffer, and the request is gone; `None` while in progress.
    pub fn request_take_owned(&mut self, r: Request) -> Result<Option<Taken>> {
        let q = self.core.reqs.get_ref(r.0).ok_or(Status::InvalidParam)?;
        let Some(status) = q.status else {
            return Ok(None);
        };
        if q.cb.is_some() || self.core.completed.contains(&r) {
            // Not ours to take yet: its completion is still being reported.
            return Ok(None);
        }
        let q = self.core.reqs.put(r.0).ok_or(Status::InvalidParam)?;
        let buf = match q.kind {
            ReqKind::Send(s) => s.buf,
            ReqKind::Recv(rs) => rs.buf,
            _ => return Err(Status::InvalidParam),
        };
        // Not started on owned memory: nothing to give back.
        let buf = buf.into_vec().unwrap_or_default();
        Ok(Some(Taken {
            status,
            info: q.info,
            buf,
        }))
    }

    /// Progresses until `r` completes or `timeout` passes, then takes it.
    pub fn wait_owned(&mut self, r: Request, timeout: std::time::Duration) -> Result<Taken> {
        self.wait_done(r, timeout)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(t) = self.request_take_owned(r)? {
                return Ok(t);
            }
            if std::time::Instant::now() > deadline {
                return Err(Status::TimedOut);
            }
            self.progress();
        }
    }
}
