//! Golden tests: real captures and spec vectors decode to the right fields, and re-encode
//! byte for byte where the format is symmetric. One module per protocol.

mod util;

mod gameagent;
mod gamespy1;
mod gamespy_master;
mod mgmt;
mod teeworlds;
mod teeworlds_master;
mod unreal2;
mod ut2003_list;
