//! Progress on the application's behalf, for a progress thread (`crate::progress_thread`).
//!
//! A turn of [`Worker::serve`] does the work peers wait for: it reads every live interface,
//! matches tag messages to posted receives (copying into the application's buffers),
//! answers emulated put/get/atomics, drives rendezvous fetches and sends, acknowledges, and
//! drains send queues. It runs no user code: completion callbacks, endpoint error and
//! connection handlers stay queued, and active messages (whose handlers are the
//! application's) are held back whole; all of them run in the application's next
//! [`Worker::progress`], in their order of arrival. That keeps the rule of thread mode
//! single: the application's callbacks run on the application's thread, inside its calls.
//!
//! Invariants: held active messages are older than anything the transports still hold, so
//! the next progress after a turn that held one is a full turn, which hands them out before
//! reading the transports; [`Worker::arm`] refuses to sleep while anything is held.

use super::Worker;
use crate::engine;
use ucs::{EventSet, Events, Result, Status};

impl Worker {
    /// One turn of progress that runs no user code (see the module docs); returns the
    /// number of events handled.
    pub fn serve(&mut self) -> usize {
        let mut n = 0;
        let mut events = false;
        let (core, p) = (&mut self.core, &mut self.p);
        let held = p.am.held.len();
        for (i, t) in self.tls.iter_mut().enumerate() {
            if t.live {
                n += t
                    .iface
                    .progress_with(|id, d| engine::dispatch_serving(core, p, id, d));
                events |= t.iface.has_events();
                if !t.iface.is_idle() && !core.hot.contains(&i) {
                    core.hot.push(i);
                }
            }
        }
        if p.am.held.len() > held {
            // The application's next progress is a full turn, which hands them out first.
            self.full_turn_next();
        }
        if events {
            self.handle_iface_events();
        }
        if !self.p.idle() {
            n += engine::run_work(&mut self.tls, &mut self.core, &mut self.p);
        }
        if !self.core.active.is_empty() {
            n += engine::run_queues(&mut self.tls, &mut self.core);
        }
        if !self.core.flushes.is_empty() {
            self.check_flushes();
        }
        n
    }

    /// A counter that moves with every [`Worker::progress`] (and when a turn of serving
    /// holds active messages back): a progress thread that sees it move knows the
    /// application is progressing by itself.
    pub fn progress_mark(&self) -> u32 {
        self.tick
    }

    /// Prepares a progress thread to sleep on [`Worker::serve_events`]. `Busy` when work
    /// for peers is waiting now; what waits for the application does not count.
    pub fn serve_arm(&mut self) -> Result<()> {
        if !self.p.idle() || !self.core.active.is_empty() {
            return Err(Status::Busy);
        }
        for t in self.tls.iter_mut().filter(|t| t.live) {
            t.iface.arm()?;
        }
        Ok(())
    }

    /// A new set of the interfaces' event descriptors, for a progress thread to sleep on
    /// without the worker. The worker's own signal is not in it (a signal is the
    /// application's), nor are the descriptors that report dead peers (the application's
    /// progress finds those).
    pub fn serve_events(&self) -> Result<EventSet> {
        let set = EventSet::new()?;
        for (i, t) in self.tls.iter().enumerate() {
            if let Some(fd) = t.iface.event_fd() {
                set.add(fd, Events::READABLE, i as u64)?;
            }
        }
        Ok(set)
    }
}
