"""What a job, a queue, a schedule is: types, names and validation. No I/O."""
