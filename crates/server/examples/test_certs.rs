//! Writes a fresh test CA and a server certificate for 127.0.0.1 into a
//! folder (`ca.pem`, `cert.pem`, `key.pem`), for the HTTPS case of the
//! `openai` Python tests. Usage: `test_certs DIR`.

#[path = "../tests/common/certs.rs"]
mod certs;

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: test_certs DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    certs::write(&certs::make("hasten test CA"), &dir);
}
