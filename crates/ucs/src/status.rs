//! Status codes with the numeric values of UCX's `ucs_status_t`.
//!
//! Invariant: the discriminants never change; they cross the C ABI as-is. `Status::Ok` and
//! `Status::InProgress` are not errors; every other value is, and [`Status`] is the error
//! type of every `Result` in rucx.

use std::fmt;

/// A UCX status code. The discriminant is the value of the matching `UCS_*` constant.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum Status {
    Ok = 0,
    InProgress = 1,
    NoMessage = -1,
    NoResource = -2,
    IoError = -3,
    NoMemory = -4,
    InvalidParam = -5,
    Unreachable = -6,
    InvalidAddr = -7,
    NotImplemented = -8,
    MessageTruncated = -9,
    NoProgress = -10,
    BufferTooSmall = -11,
    NoElem = -12,
    SomeConnectsFailed = -13,
    NoDevice = -14,
    Busy = -15,
    Canceled = -16,
    ShmemSegment = -17,
    AlreadyExists = -18,
    OutOfRange = -19,
    TimedOut = -20,
    ExceedsLimit = -21,
    Unsupported = -22,
    Rejected = -23,
    NotConnected = -24,
    ConnectionReset = -25,
    FirstLinkFailure = -40,
    LastLinkFailure = -59,
    FirstEndpointFailure = -60,
    EndpointTimeout = -80,
    LastEndpointFailure = -89,
    Last = -100,
}

/// Every defined status, in declaration order (used by tests and `rucx-info`).
pub const ALL: [Status; 33] = [
    Status::Ok,
    Status::InProgress,
    Status::NoMessage,
    Status::NoResource,
    Status::IoError,
    Status::NoMemory,
    Status::InvalidParam,
    Status::Unreachable,
    Status::InvalidAddr,
    Status::NotImplemented,
    Status::MessageTruncated,
    Status::NoProgress,
    Status::BufferTooSmall,
    Status::NoElem,
    Status::SomeConnectsFailed,
    Status::NoDevice,
    Status::Busy,
    Status::Canceled,
    Status::ShmemSegment,
    Status::AlreadyExists,
    Status::OutOfRange,
    Status::TimedOut,
    Status::ExceedsLimit,
    Status::Unsupported,
    Status::Rejected,
    Status::NotConnected,
    Status::ConnectionReset,
    Status::FirstLinkFailure,
    Status::LastLinkFailure,
    Status::FirstEndpointFailure,
    Status::EndpointTimeout,
    Status::LastEndpointFailure,
    Status::Last,
];

impl Status {
    /// The numeric value, as `ucs_status_t` carries it.
    #[inline]
    pub const fn code(self) -> i8 {
        self as i8
    }

    /// The status with numeric value `code`, if there is one with exactly that value.
    /// Codes inside the link- and endpoint-failure ranges that have no name of their own
    /// are not representable and give `None`.
    pub fn from_code(code: i32) -> Option<Status> {
        ALL.iter().copied().find(|s| i32::from(s.code()) == code)
    }

    /// True for every value that is neither `Ok` nor `InProgress`.
    #[inline]
    pub const fn is_err(self) -> bool {
        (self as i8) < 0
    }

    /// The fixed English message for this status (the text `ucs_status_string` returns).
    pub const fn message(self) -> &'static str {
        match self {
            Status::Ok => "Success",
            Status::InProgress => "Operation in progress",
            Status::NoMessage => "No pending message",
            Status::NoResource => "No resources are available to initiate the operation",
            Status::IoError => "Input/output error",
            Status::NoMemory => "Out of memory",
            Status::InvalidParam => "Invalid parameter",
            Status::Unreachable => "Destination is unreachable",
            Status::InvalidAddr => "Address not valid",
            Status::NotImplemented => "Function not implemented",
            Status::MessageTruncated => "Message truncated",
            Status::NoProgress => "No progress",
            Status::BufferTooSmall => "Provided buffer is too small",
            Status::NoElem => "No such element",
            Status::SomeConnectsFailed => "Failed to connect some of the requested endpoints",
            Status::NoDevice => "No such device",
            Status::Busy => "Device is busy",
            Status::Canceled => "Request canceled",
            Status::ShmemSegment => "Shared memory error",
            Status::AlreadyExists => "Element already exists",
            Status::OutOfRange => "Index out of range",
            Status::TimedOut => "Operation timed out",
            Status::ExceedsLimit => "User-defined limit was reached",
            Status::Unsupported => "Unsupported operation",
            Status::Rejected => "Operation rejected by remote peer",
            Status::NotConnected => "Endpoint is not connected",
            Status::ConnectionReset => "Connection reset by remote peer",
            Status::FirstLinkFailure => "First link failure",
            Status::LastLinkFailure => "Last link failure",
            Status::FirstEndpointFailure => "First endpoint failure",
            Status::EndpointTimeout => "Endpoint timeout",
            Status::LastEndpointFailure => "Last endpoint failure",
            Status::Last => "Last error code",
        }
    }

    /// Maps an OS error number to the closest status.
    pub fn from_errno(errno: i32) -> Status {
        match errno {
            libc::ENOMEM => Status::NoMemory,
            libc::EINVAL | libc::EFAULT => Status::InvalidParam,
            libc::EAGAIN => Status::NoResource,
            libc::EPERM | libc::EACCES => Status::Rejected,
            libc::ESRCH | libc::ENOENT | libc::EBADF => Status::Unreachable,
            libc::ECONNRESET | libc::EPIPE => Status::ConnectionReset,
            libc::ECONNREFUSED => Status::Unreachable,
            libc::ETIMEDOUT => Status::TimedOut,
            libc::ENODEV | libc::ENXIO => Status::NoDevice,
            libc::EBUSY => Status::Busy,
            libc::ENOSYS | libc::EOPNOTSUPP => Status::Unsupported,
            _ => Status::IoError,
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message(), self.code())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Status {}

impl From<rustix::io::Errno> for Status {
    fn from(e: rustix::io::Errno) -> Status {
        Status::from_errno(e.raw_os_error())
    }
}

impl From<std::io::Error> for Status {
    fn from(e: std::io::Error) -> Status {
        e.raw_os_error().map_or(Status::IoError, Status::from_errno)
    }
}

/// The result type of rucx: the error is a [`Status`] that `is_err()`.
pub type Result<T> = std::result::Result<T, Status>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_ucx() {
        assert_eq!(Status::Ok.code(), 0);
        assert_eq!(Status::InProgress.code(), 1);
        assert_eq!(Status::NoResource.code(), -2);
        assert_eq!(Status::MessageTruncated.code(), -9);
        assert_eq!(Status::Canceled.code(), -16);
        assert_eq!(Status::Unsupported.code(), -22);
        assert_eq!(Status::ConnectionReset.code(), -25);
        assert_eq!(Status::EndpointTimeout.code(), -80);
        assert_eq!(Status::Last.code(), -100);
    }

    #[test]
    fn round_trip_codes() {
        for s in ALL {
            assert_eq!(Status::from_code(i32::from(s.code())), Some(s));
        }
        assert_eq!(Status::from_code(-30), None);
        assert_eq!(Status::from_code(7), None);
    }

    #[test]
    fn only_negative_codes_are_errors() {
        assert!(!Status::Ok.is_err());
        assert!(!Status::InProgress.is_err());
        assert!(ALL[2..].iter().all(|s| s.is_err()));
    }
}
