//! The owned-buffer API: nonblocking calls that are safe, because the buffer moves into
//! the request and comes back when the request is taken ([`Worker::request_take_owned`]).
//! The raw-pointer calls (`tag_send_nb` and friends, with [`Buf`]) stay for the C ABI and
//! for zero-copy users who manage lifetimes themselves.

use super::Worker;
use crate::am::AmSendFlags;
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
    /// Moves `owned` into request `r` (which was started on the same memory).
    fn attach(&mut self, r: Request, owned: OwnedBuf) {
        if let Some(q) = self.core.reqs.get_mut(r.0) {
            match &mut q.kind {
                ReqKind::Send(s) => s.buf = Buf::Owned(owned),
                ReqKind::Recv(rs) => rs.buf = Buf::Owned(owned),
                _ => drop(owned),
            }
        }
    }

    fn sent(&mut self, r: Option<Request>, owned: OwnedBuf) -> Sent {
        match r {
            None => Sent::Done(owned.into_vec()),
            Some(r) => {
                self.attach(r, owned);
                Sent::Pending(r)
            }
        }
    }

    /// Sends `data` with `tag` on `ep`; the buffer comes back when the send is done.
    pub fn tag_send_owned(&mut self, ep: Ep, data: Vec<u8>, tag: u64, sync: bool) -> Result<Sent> {
        let owned = OwnedBuf::new(data);
        let (ptr, len) = owned.raw();
        // SAFETY: the memory belongs to `owned`, which nothing else touches and which
        // moves into the request (or comes back to the caller) before this returns.
        let r = unsafe { self.tag_send_nb(ep, Buf::contig(ptr, len), tag, sync, None)? };
        Ok(self.sent(r, owned))
    }

    /// Posts a receive into `buf` (its length is the most the receive takes).
    pub fn tag_recv_owned(&mut self, buf: Vec<u8>, tag: u64, mask: u64) -> Result<Request> {
        let owned = OwnedBuf::new(buf);
        let (ptr, len) = owned.raw();
        // SAFETY: as in tag_send_owned.
        let r = unsafe { self.tag_recv_nb(Buf::contig(ptr, len), tag, mask, None)? };
        self.attach(r, owned);
        Ok(r)
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
        let owned = OwnedBuf::new(data);
        let (ptr, len) = owned.raw();
        // SAFETY: as in tag_send_owned.
        let r = unsafe { self.am_send_nb(ep, id, header, Buf::contig(ptr, len), flags, None)? };
        Ok(self.sent(r, owned))
    }

    /// Sends `data` on `ep`'s stream.
    pub fn stream_send_owned(&mut self, ep: Ep, data: Vec<u8>) -> Result<Sent> {
        let owned = OwnedBuf::new(data);
        let (ptr, len) = owned.raw();
        // SAFETY: as in tag_send_owned.
        let r = unsafe { self.stream_send_nb(ep, Buf::contig(ptr, len), None)? };
        Ok(self.sent(r, owned))
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
        let owned = OwnedBuf::new(buf);
        let (ptr, len) = owned.raw();
        // SAFETY: as in tag_send_owned.
        match unsafe { self.stream_recv_nb(ep, Buf::contig(ptr, len), waitall, None)? } {
            StreamRecv::Done(n) => {
                let mut v = owned.into_vec();
                v.truncate(n);
                Ok(Err(v))
            }
            StreamRecv::Pending(r) => {
                self.attach(r, owned);
                Ok(Ok(r))
            }
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
        let buf = match buf {
            Buf::Owned(o) => o.into_vec(),
            // Not started by an owned-buffer call: nothing to give back.
            _ => Vec::new(),
        };
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
