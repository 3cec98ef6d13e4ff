"""The switch side of the southbound wire: the device agent and everything only it runs.

This package owns what runs on a switch beside FRR: the agent's transaction
state machine and gRPC server (:mod:`southbound.device.agent`), its side
effects on FRR and the kernel (:mod:`~southbound.device.frr_apply`,
:mod:`~southbound.device.frr_delta`, :mod:`~southbound.device.fib`), the
counters and operational state it serves (:mod:`~southbound.device.counters`,
:mod:`~southbound.device.opstate`) over its gNMI service
(:mod:`~southbound.device.gnmi_server`), and the dry driver that runs the
agent's logic in process (:mod:`~southbound.device.dry`). It may import the
wire's shared modules of :mod:`southbound` (config, state, grpc_adapter,
render, pki, the gNMI codec, the FRR vty client :mod:`southbound.vty`, which
the labs read their nodes' sessions with too); the controller side never imports
it (an import-linter contract), only the composition root (the CLI) and the
labs start agents.
"""
