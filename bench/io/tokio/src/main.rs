//! The io suite's tokio competitor (bench/io/io_bench.cpp): a stream echo
//! server, one task per connection.
//! Usage: spindle_bench_tokio_echo PORT WORKERS [--multi]
//!   without --multi: the current-thread runtime (one thread; WORKERS must
//!   be 1); with --multi: the multi-thread (work-stealing) runtime with
//!   WORKERS worker threads.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

async fn serve(mut s: TcpStream) {
    let mut buf = vec![0u8; 16384];
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if s.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn run(port: u16) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let sock = TcpSocket::new_v4().expect("socket");
    sock.set_reuseaddr(true).expect("SO_REUSEADDR");
    sock.bind(addr).expect("bind");
    let listener: TcpListener = sock.listen(4096).expect("listen");
    loop {
        if let Ok((s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(serve(s));
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: spindle_bench_tokio_echo PORT WORKERS [--multi]");
        std::process::exit(2)
    };
    if args.len() < 3 || args.len() > 4 || (args.len() == 4 && args[3] != "--multi") {
        usage();
    }
    let port: u16 = args[1].parse().unwrap_or_else(|_| usage());
    let workers: usize = args[2].parse().unwrap_or_else(|_| usage());
    if port == 0 || workers < 1 {
        usage();
    }
    let rt = if args.len() == 4 {
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_io().build()
    } else {
        if workers != 1 {
            eprintln!("spindle_bench_tokio_echo: the current-thread runtime has one worker (use --multi)");
            std::process::exit(2);
        }
        tokio::runtime::Builder::new_current_thread().enable_io().build()
    }
    .expect("tokio runtime");
    rt.block_on(run(port));
}
