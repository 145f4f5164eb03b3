//! Streams: an ordered byte stream per endpoint. Sends are cut into transport messages
//! that carry the sender's worker id; the receiver appends them to the endpoint's stream
//! and hands bytes to receives in posting order, either "whatever is there" or "exactly
//! this many" (`waitall`).
//!
//! ```text
//! id 17  Stream: src uuid u64 | bytes
//! ```

use crate::proto::select::Proto;
use crate::request::*;
use crate::worker::{enqueue, route, Ep, Lane, Queued, Route, State, Tl, Worker};
use std::time::Duration;
use ucs::{Result, Status};

pub const AM_STREAM: u8 = 17;
const HDR: usize = 8;

/// Outcome of a stream receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRecv {
    /// Completed in the call with this many bytes.
    Done(usize),
    /// Waiting for data.
    Pending(Request),
}

impl Worker {
    /// Sends `buf` on `ep`'s stream. `None`: complete.
    ///
    /// # Safety
    /// `buf` must stay readable and unchanged until the send completes.
    pub unsafe fn stream_send_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        let (tls, st) = (&mut self.tls, &mut self.st);
        let lane = match route(tls, st, ep.0)? {
            Route::Lane(l) => Some(l),
            Route::Queue => None,
            Route::Fail(s) => {
                let r = st.new_req(
                    ReqKind::Send(SendState::new(SendKind::Stream, ep.0, buf)),
                    cb,
                );
                st.failed_ops.push((r, s));
                return Ok(Some(r));
            }
        };
        // Straight from the caller's buffer while the endpoint has nothing queued: no
        // request unless something is left over.
        let mut sent = 0;
        if let (Some(lane), Some(p), true) = (lane, buf.contig_ptr(), st.ep(ep.0)?.queue.is_empty())
        {
            let len = buf.len();
            let hdr = st.uuid.to_le_bytes();
            let chunk_max = lane.th.max_bcopy.max(1);
            while sent < len {
                let n = chunk_max.min(len - sent);
                // SAFETY: sent + n <= len, inside the caller's buffer, readable per the
                // function's contract.
                let piece = unsafe { std::slice::from_raw_parts(p.add(sent), n) };
                if !tls[lane.tl]
                    .iface
                    .am_zcopy(lane.ep, AM_STREAM, &hdr, &[piece], 0)?
                    .is_done()
                {
                    break;
                }
                sent += n;
            }
            if sent == len {
                return Ok(None);
            }
        }
        let mut s = SendState::new(SendKind::Stream, ep.0, buf);
        s.offset = sent;
        s.proto = Proto::Multi;
        let r = st.new_req(ReqKind::Send(s), cb);
        enqueue(tls, st, ep.0, Queued::Send(r))?;
        Ok(Some(r))
    }

    /// Receives from `ep`'s stream into `buf`: with `waitall`, exactly `buf.len()` bytes;
    /// otherwise whatever is there (at least one byte).
    ///
    /// # Safety
    /// `buf` must stay writable and unaliased until the receive completes.
    pub unsafe fn stream_recv_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        waitall: bool,
        cb: Option<Callback>,
    ) -> Result<StreamRecv> {
        let st = &mut self.st;
        st.ep(ep.0)?;
        if buf.is_empty() {
            return Err(Status::InvalidParam);
        }
        let r = st.new_req(
            ReqKind::Recv(RecvState {
                buf,
                recv_id: None,
                received: 0,
                truncated: false,
                waitall,
            }),
            cb,
        );
        st.ep_mut(ep.0)?.stream_reqs.push_back(r);
        st.stream_satisfy(ep.0);
        // Completed in the call: report the length and drop the request.
        let q = st.reqs.get_ref(r.0).ok_or(Status::InvalidParam)?;
        if q.status == Some(Status::Ok) && !st.completed.contains(&r) {
            let n = q.info.length;
            st.reqs.remove(r.0);
            return Ok(StreamRecv::Done(n));
        }
        Ok(StreamRecv::Pending(r))
    }

    /// Takes whatever stream bytes `ep` has received (in one piece as they arrived), if
    /// any; no receive buffer involved.
    pub fn stream_recv_data(&mut self, ep: Ep) -> Result<Option<Vec<u8>>> {
        let e = self.st.ep_mut(ep.0)?;
        if !e.stream_reqs.is_empty() {
            return Ok(None);
        }
        let Some(mut v) = e.stream_rx.pop_front() else {
            return Ok(None);
        };
        if e.stream_off > 0 {
            v.drain(..e.stream_off);
            e.stream_off = 0;
        }
        Ok(Some(v))
    }

    /// Blocking send.
    /// Up to `max` endpoints whose stream has received bytes not yet consumed (after
    /// progressing the worker once). An endpoint stays listed until its bytes are read.
    pub fn stream_ready(&mut self, max: usize) -> Vec<Ep> {
        self.progress();
        self.st
            .eps
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.as_ref()
                    .is_some_and(|e| !e.implicit && !e.stream_rx.is_empty())
            })
            .map(|(i, _)| Ep(i as u32))
            .take(max)
            .collect()
    }

    pub fn stream_send(&mut self, ep: Ep, data: &[u8]) -> Result<()> {
        // SAFETY: `data` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let r = unsafe {
            self.stream_send_nb(ep, Buf::contig(data.as_ptr().cast_mut(), data.len()), None)?
        };
        self.stream_finish(r).map(|_| ())
    }

    /// Blocking receive; returns the byte count.
    pub fn stream_recv(&mut self, ep: Ep, buf: &mut [u8], waitall: bool) -> Result<usize> {
        // SAFETY: as in stream_send.
        match unsafe {
            self.stream_recv_nb(ep, Buf::contig(buf.as_mut_ptr(), buf.len()), waitall, None)?
        } {
            StreamRecv::Done(n) => Ok(n),
            StreamRecv::Pending(r) => self.stream_finish(Some(r)),
        }
    }

    fn stream_finish(&mut self, r: Option<Request>) -> Result<usize> {
        let Some(r) = r else { return Ok(0) };
        match self.wait_done(r, Duration::from_secs(120)) {
            Ok(s) => {
                let n = self.request_info(r)?.length;
                self.request_free(r)?;
                if s == Status::Ok {
                    Ok(n)
                } else {
                    Err(s)
                }
            }
            Err(e) => {
                self.request_abort(r)?;
                self.request_free(r)?;
                Err(e)
            }
        }
    }
}

/// Sends the next pieces of a stream send.
pub(crate) fn stream_send_step(
    tls: &mut [Tl],
    st: &mut State,
    lane: Lane,
    r: Request,
) -> Result<bool> {
    let uuid = st.uuid;
    let Some(Req {
        kind: ReqKind::Send(s),
        ..
    }) = st.reqs.get_mut(r.0)
    else {
        return Ok(true);
    };
    let len = s.buf.len();
    let chunk_max = lane.th.max_bcopy.max(1);
    while s.offset < len {
        let off = s.offset;
        let n = chunk_max.min(len - off);
        let buf = &s.buf;
        let out = tls[lane.tl].iface.am_bcopy(lane.ep, AM_STREAM, |b| {
            b[..HDR].copy_from_slice(&uuid.to_le_bytes());
            // SAFETY: the sender promised the buffer stays readable until completion.
            HDR + unsafe { buf.read_at(off, &mut b[HDR..HDR + n]) }
        })?;
        if !out.is_done() {
            return Ok(false);
        }
        s.offset += n;
    }
    st.complete(r, Status::Ok);
    Ok(true)
}

impl State {
    /// Appends arrived stream bytes to the sender's endpoint.
    pub(crate) fn on_stream(&mut self, d: &[u8]) -> Result<()> {
        if d.len() < HDR {
            return Err(Status::InvalidParam);
        }
        let uuid = u64::from_le_bytes(d[..HDR].try_into().map_err(|_| Status::InvalidParam)?);
        let ep = *self.by_uuid.get(&uuid).ok_or(Status::InvalidParam)?;
        let mut data = &d[HDR..];
        // Receives already waiting take the bytes straight from the message (nothing older
        // can be queued then); only what is left is kept.
        while !data.is_empty() {
            let e = self.ep_mut(ep)?;
            if !e.stream_rx.is_empty() {
                break;
            }
            let Some(&r) = e.stream_reqs.front() else {
                break;
            };
            let done = match self.reqs.get_mut(r.0) {
                Some(Req {
                    kind: ReqKind::Recv(rs),
                    info,
                    status: None,
                    ..
                }) => {
                    // SAFETY: the receiver promised the buffer is writable until completion.
                    let n = unsafe { rs.buf.write_at(rs.received, data) };
                    rs.received += n;
                    info.length = rs.received;
                    data = &data[n..];
                    rs.received == rs.buf.len() || !rs.waitall
                }
                _ => true,
            };
            if !done {
                break;
            }
            self.ep_mut(ep)?.stream_reqs.pop_front();
            self.complete(r, Status::Ok);
        }
        if !data.is_empty() {
            self.ep_mut(ep)?.stream_rx.push_back(data.to_vec());
            self.stream_satisfy(ep);
        }
        Ok(())
    }

    /// Moves received stream bytes into waiting receives, in order.
    pub(crate) fn stream_satisfy(&mut self, ep: u32) {
        loop {
            let Ok(e) = self.ep_mut(ep) else { return };
            let Some(&r) = e.stream_reqs.front() else {
                return;
            };
            if e.stream_rx.is_empty() {
                return;
            }
            let Some(Req {
                kind: ReqKind::Recv(rs),
                info,
                ..
            }) = self.reqs.get_mut(r.0)
            else {
                if let Ok(e) = self.ep_mut(ep) {
                    e.stream_reqs.pop_front();
                }
                continue;
            };
            let Some(Some(e)) = self.eps.get_mut(ep as usize) else {
                return;
            };
            let want = rs.buf.len();
            while rs.received < want {
                let Some(front) = e.stream_rx.front() else {
                    break;
                };
                let avail = &front[e.stream_off..];
                // SAFETY: the receiver promised the buffer is writable until completion.
                let n = unsafe { rs.buf.write_at(rs.received, avail) };
                rs.received += n;
                e.stream_off += n;
                if e.stream_off == front.len() {
                    e.stream_rx.pop_front();
                    e.stream_off = 0;
                }
            }
            let done = rs.received == want || (!rs.waitall && rs.received > 0);
            info.length = rs.received;
            if !done {
                return;
            }
            e.stream_reqs.pop_front();
            self.complete(r, Status::Ok);
        }
    }
}
