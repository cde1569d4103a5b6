//! distlock's integration tests, one binary (`cargo test --test it`):
//! one link of redis, rustls and ring instead of one per file, and one
//! pool of test threads. A module is one former test file; shared helpers
//! are in `common/`. Run one group with `cargo test --locked --test it
//! faults::` (see CONTRIBUTING.md).

mod common;

mod architecture;
mod assets;
mod cli;
mod cron_ci;
mod deps;
mod doctor;
mod etcd;
mod etcd_cluster;
mod etcd_interop;
mod etcd_limit;
mod etcd_record;
mod etcd_secure;
mod etcd_wait;
mod faults;
mod fencing;
mod foreign_keys;
mod ha;
mod history;
mod list_scale;
mod lock;
mod metrics;
mod once_per;
mod output;
mod package;
mod props;
mod queue_scale;
mod run_basics;
mod security;
mod smoke;
mod status_line;
mod supervise;
mod tokens;
mod tty;
mod waiting;
