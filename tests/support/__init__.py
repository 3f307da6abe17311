"""What the tests share and are not tests: the loopback upstreams (fake_upstreams, hostile, gitserver), the
NeMo-RL-shaped repository (nemo_repo), real wheels and Ubuntu packages (realwheels, realdebs), the build engine
(engine), forged images, trees and in-memory engines, golden comparison, and where the data folders are (paths).
A test module never imports another test module: what two of them share lives here or in a conftest.py
(tests/unit/suite/test_suite_rules.py holds both)."""
