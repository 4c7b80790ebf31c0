"""ISR replication: followers fetch from leaders, the high watermark, acks=all."""
