//! The remote-memory-access API of the worker (the protocol is in `crate::rma`).

use super::{posted, Imm, Worker};
use crate::core::cq::CqOp;
use crate::core::ep::Ep;
use crate::core::request::*;
use crate::rma::{self, RemoteKey, Signal, Src};
use std::sync::atomic::Ordering;
use std::time::Duration;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize};

impl Worker {
    /// Unpacks a remote key for use on `ep` and resolves its access path. The owner's
    /// process (for CMA and segment keys) is the peer of the endpoint's lane.
    pub fn rkey_unpack(&mut self, ep: Ep, packed: &[u8]) -> Result<RemoteKey> {
        self.core.check(ep)?;
        // A key is resolved for the lane it will be used on: an endpoint still asking its
        // server for the address has none yet, so wait for it here (a slow path).
        self.wait_connecting(ep, Duration::from_secs(30))?;
        rma::unpack(&mut self.tls, &mut self.core, ep, packed)
    }

    /// Writes the bytes of `src` to `addr` in the key's memory. `None`: complete.
    #[inline(always)]
    pub fn put_nb(
        &mut self,
        ep: Ep,
        src: Buf,
        addr: u64,
        rk: &RemoteKey,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.check(ep)?;
        if cb.is_none() {
            // Mapped and CMA puts complete here, and with no callback there is nothing to
            // report: no request, no completion path.
            if let Some(done) = rma::put_in_call(ep, &src, addr, rk) {
                return done.map(|()| None);
            }
        }
        self.put_nb_posted(ep, src, addr, rk, cb)
    }

    /// [`Worker::put_nb`] past its in-call path: the put as a request, or sent by
    /// messages.
    #[inline(never)]
    fn put_nb_posted(
        &mut self,
        ep: Ep,
        src: Buf,
        addr: u64,
        rk: &RemoteKey,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.stamp(&mut cb, CqOp::Put)?;
        let len = src.len();
        let post = rma::put_nb(&mut self.core, ep, src, addr, rk, cb)?;
        let imm = Imm {
            length: len,
            tag: 0,
        };
        posted(&mut self.tls, &mut self.core, ep.0, post, true, imm)
    }

    /// Writes `data` to `addr`; locally complete on return (the data was taken), remotely
    /// complete after a flush.
    pub fn put_nbi(&mut self, ep: Ep, data: &[u8], addr: u64, rk: &RemoteKey) -> Result<()> {
        self.core.check(ep)?;
        let post = rma::put_nbi(&mut self.core, ep, data, addr, rk)?;
        posted(
            &mut self.tls,
            &mut self.core,
            ep.0,
            post,
            true,
            Imm::default(),
        )
        .map(drop)
    }

    /// Writes the bytes of `src` to `addr`, then applies `op` with `value` to the
    /// 64-bit word at `signal_addr` (8-byte aligned, in `signal_rk`'s memory): a target
    /// that reads the word with acquire ordering and sees the signal sees the data.
    /// `None`: complete (the data and the signal are both in place).
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_nb(
        &mut self,
        ep: Ep,
        src: Buf,
        addr: u64,
        rk: &RemoteKey,
        signal_addr: u64,
        signal_rk: &RemoteKey,
        op: SignalOp,
        value: u64,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::Put)?;
        let len = src.len();
        let sig = Signal {
            addr: signal_addr,
            rk: signal_rk,
            op,
            value,
        };
        let post = rma::put_signal(&mut self.core, ep, Src::Buf(src), addr, rk, &sig, cb)?;
        let imm = Imm {
            length: len,
            tag: 0,
        };
        posted(&mut self.tls, &mut self.core, ep.0, post, true, imm)
    }

    /// [`Worker::put_signal_nb`] on a copy of `data`: locally complete on return; the data
    /// and the signal are both in place after a flush.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_nbi(
        &mut self,
        ep: Ep,
        data: &[u8],
        addr: u64,
        rk: &RemoteKey,
        signal_addr: u64,
        signal_rk: &RemoteKey,
        op: SignalOp,
        value: u64,
    ) -> Result<()> {
        self.core.check(ep)?;
        let sig = Signal {
            addr: signal_addr,
            rk: signal_rk,
            op,
            value,
        };
        let post = rma::put_signal(&mut self.core, ep, Src::Copy(data), addr, rk, &sig, None)?;
        posted(
            &mut self.tls,
            &mut self.core,
            ep.0,
            post,
            true,
            Imm::default(),
        )
        .map(drop)
    }

    /// Reads `dst.len()` bytes at `addr` into `dst`. `None`: complete.
    pub fn get_nb(
        &mut self,
        ep: Ep,
        dst: Buf,
        addr: u64,
        rk: &RemoteKey,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.check(ep)?;
        self.core.stamp(&mut cb, CqOp::Get)?;
        let len = dst.len();
        let post = rma::get_nb(&mut self.core, ep, dst, addr, rk, cb, false)?;
        let imm = Imm {
            length: len,
            tag: 0,
        };
        posted(&mut self.tls, &mut self.core, ep.0, post, true, imm)
    }

    /// Reads `dst.len()` bytes at `addr` into `dst`; the data is there after a flush of
    /// the endpoint (or the worker). The request is the worker's: for a `dst` made by
    /// [`Buf::contig`], "until the request completes" means until that flush completes.
    pub fn get_nbi(&mut self, ep: Ep, dst: Buf, addr: u64, rk: &RemoteKey) -> Result<()> {
        self.core.check(ep)?;
        let post = rma::get_nb(&mut self.core, ep, dst, addr, rk, None, true)?;
        posted(
            &mut self.tls,
            &mut self.core,
            ep.0,
            post,
            true,
            Imm::default(),
        )
        .map(drop)
    }

    /// An atomic without result; remotely complete after a flush.
    pub fn atomic_post(
        &mut self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        addr: u64,
        rk: &RemoteKey,
    ) -> Result<()> {
        self.core.check(ep)?;
        let post = rma::atomic_post(&mut self.core, ep, op, size, value, addr, rk)?;
        posted(
            &mut self.tls,
            &mut self.core,
            ep.0,
            post,
            true,
            Imm::default(),
        )
        .map(drop)
    }

    /// An atomic that writes the previous value into `result` (`compare` is for cswap):
    /// its first `size` bytes, in native byte order; a shorter `result` is refused
    /// (`InvalidParam`). `None`: complete, the value written.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn atomic_fetch_nb(
        &mut self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        result: Buf,
        addr: u64,
        rk: &RemoteKey,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.check(ep)?;
        if cb.is_none() {
            // As in put_nb: a CPU atomic through a mapping has nothing left to report.
            if let Some(done) =
                rma::atomic_fetch_in_call(ep, op, size, value, compare, &result, addr, rk)
            {
                return done.map(|()| None);
            }
        }
        self.atomic_fetch_posted(ep, op, size, value, compare, result, addr, rk, cb)
    }

    /// [`Worker::atomic_fetch_nb`] past its in-call path.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn atomic_fetch_posted(
        &mut self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        result: Buf,
        addr: u64,
        rk: &RemoteKey,
        mut cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.core.stamp(&mut cb, CqOp::Atomic)?;
        let post = rma::atomic_fetch_nb(
            &mut self.core,
            ep,
            op,
            size,
            value,
            compare,
            result,
            addr,
            rk,
            cb,
        )?;
        let imm = Imm {
            length: size.bytes(),
            tag: 0,
        };
        posted(&mut self.tls, &mut self.core, ep.0, post, true, imm)
    }

    /// Orders earlier remote accesses before later ones. Every path here executes in
    /// issue order (direct and CMA complete in the call, emulated ones travel in order on
    /// one lane and run in order at the target), so there is nothing to wait for.
    pub fn fence(&mut self) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    /// Blocking put: returns when the data is in the remote memory.
    pub fn put(&mut self, ep: Ep, data: &[u8], addr: u64, rk: &RemoteKey) -> Result<()> {
        self.core.check(ep)?;
        self.put_nbi(ep, data, addr, rk)?;
        self.flush_ep_blocking(ep)
    }

    /// Blocking get.
    #[allow(unsafe_code)] // lends the borrowed slice to the request it waits for
    pub fn get(&mut self, ep: Ep, buf: &mut [u8], addr: u64, rk: &RemoteKey) -> Result<()> {
        self.core.check(ep)?;
        // SAFETY: `buf` is borrowed for this whole call; on timeout the request is
        // aborted before returning.
        let dst = unsafe { Buf::contig(buf.as_mut_ptr(), buf.len()) };
        let r = self.get_nb(ep, dst, addr, rk, None)?;
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Blocking fetching atomic; returns the previous value.
    #[allow(clippy::too_many_arguments)]
    #[allow(unsafe_code)] // lends a local to the request it waits for
    pub fn atomic_fetch(
        &mut self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        addr: u64,
        rk: &RemoteKey,
    ) -> Result<u64> {
        self.core.check(ep)?;
        let mut out = [0u8; 8];
        // SAFETY: `out` lives for this whole call, and block_on sees the request complete
        // or aborts it before returning.
        let result = unsafe { Buf::contig(out.as_mut_ptr(), out.len()) };
        let r = self.atomic_fetch_nb(ep, op, size, value, compare, result, addr, rk, None)?;
        match self.block_on(r)? {
            Status::Ok => Ok(match size {
                AtomicSize::B32 => u64::from(u32::from_ne_bytes([out[0], out[1], out[2], out[3]])),
                AtomicSize::B64 => u64::from_ne_bytes(out),
            }),
            s => Err(s),
        }
    }

    /// Flushes `ep` and waits.
    pub fn flush_ep_blocking(&mut self, ep: Ep) -> Result<()> {
        self.core.check(ep)?;
        match self.ep_flush_nb(ep, None)? {
            None => Ok(()),
            Some(r) => match self.wait_request(r, Duration::from_secs(120))? {
                Status::Ok => Ok(()),
                s => Err(s),
            },
        }
    }
}
