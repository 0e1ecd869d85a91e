"""The AMQP 1.0 link: proton's engine driven by trio, outgoing peers, inbound connections, credit,
TLS and bounds.
"""
