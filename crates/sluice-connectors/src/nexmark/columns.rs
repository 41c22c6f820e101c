//! Column builders for one batch of a Nexmark stream, in the stream's full
//! column order (see [`NexmarkStream::schema`]).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringBuilder, TimestampMillisecondArray};
use nexmark::event::Event;

use super::NexmarkStream;

/// Builders for every column of one stream.
pub(super) enum Columns {
    Person {
        id: Vec<i64>,
        name: StringBuilder,
        email_address: StringBuilder,
        credit_card: StringBuilder,
        city: StringBuilder,
        state: StringBuilder,
        date_time: Vec<i64>,
        extra: StringBuilder,
    },
    Auction {
        id: Vec<i64>,
        item_name: StringBuilder,
        description: StringBuilder,
        initial_bid: Vec<i64>,
        reserve: Vec<i64>,
        date_time: Vec<i64>,
        expires: Vec<i64>,
        seller: Vec<i64>,
        category: Vec<i64>,
        extra: StringBuilder,
    },
    Bid {
        auction: Vec<i64>,
        bidder: Vec<i64>,
        price: Vec<i64>,
        channel: StringBuilder,
        url: StringBuilder,
        date_time: Vec<i64>,
        extra: StringBuilder,
    },
}

fn text(rows: usize, bytes_per_row: usize) -> StringBuilder {
    StringBuilder::with_capacity(rows, rows * bytes_per_row)
}

/// Ids and prices are generated as `usize` well below 2^53.
fn int(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Columns {
    /// Empty builders sized for `rows` rows.
    pub(super) fn new(stream: NexmarkStream, rows: usize) -> Self {
        match stream {
            NexmarkStream::Person => Columns::Person {
                id: Vec::with_capacity(rows),
                name: text(rows, 12),
                email_address: text(rows, 17),
                credit_card: text(rows, 19),
                city: text(rows, 10),
                state: text(rows, 2),
                date_time: Vec::with_capacity(rows),
                extra: text(rows, 140),
            },
            NexmarkStream::Auction => Columns::Auction {
                id: Vec::with_capacity(rows),
                item_name: text(rows, 20),
                description: text(rows, 100),
                initial_bid: Vec::with_capacity(rows),
                reserve: Vec::with_capacity(rows),
                date_time: Vec::with_capacity(rows),
                expires: Vec::with_capacity(rows),
                seller: Vec::with_capacity(rows),
                category: Vec::with_capacity(rows),
                extra: text(rows, 340),
            },
            NexmarkStream::Bid => Columns::Bid {
                auction: Vec::with_capacity(rows),
                bidder: Vec::with_capacity(rows),
                price: Vec::with_capacity(rows),
                channel: text(rows, 8),
                url: text(rows, 60),
                date_time: Vec::with_capacity(rows),
                extra: text(rows, 70),
            },
        }
    }

    /// Append one event, with its event time replaced by `date_time` (ms).
    /// Returns false if the event is not of this stream's kind.
    pub(super) fn push(&mut self, event: &Event, date_time: i64, event_time_rate: u64) -> bool {
        match (self, event) {
            (
                Columns::Person {
                    id,
                    name,
                    email_address,
                    credit_card,
                    city,
                    state,
                    date_time: dt,
                    extra,
                },
                Event::Person(p),
            ) => {
                id.push(int(p.id));
                name.append_value(&p.name);
                email_address.append_value(&p.email_address);
                credit_card.append_value(&p.credit_card);
                city.append_value(&p.city);
                state.append_value(&p.state);
                dt.push(date_time);
                extra.append_value(&p.extra);
            }
            (
                Columns::Auction {
                    id,
                    item_name,
                    description,
                    initial_bid,
                    reserve,
                    date_time: dt,
                    expires,
                    seller,
                    category,
                    extra,
                },
                Event::Auction(a),
            ) => {
                id.push(int(a.id));
                item_name.append_value(&a.item_name);
                description.append_value(&a.description);
                initial_bid.push(int(a.initial_bid));
                reserve.push(int(a.reserve));
                dt.push(date_time);
                // Keep the generated auction length, relative to our event
                // time: the generator's clock runs at Nexmark's density, so
                // its length scales by how much slower ours runs.
                let length = u128::from(a.expires.saturating_sub(a.date_time))
                    * u128::from(super::DEFAULT_EVENT_TIME_RATE)
                    / u128::from(event_time_rate.max(1));
                expires.push(date_time.saturating_add(i64::try_from(length).unwrap_or(i64::MAX)));
                seller.push(int(a.seller));
                category.push(int(a.category));
                extra.append_value(&a.extra);
            }
            (
                Columns::Bid {
                    auction,
                    bidder,
                    price,
                    channel,
                    url,
                    date_time: dt,
                    extra,
                },
                Event::Bid(b),
            ) => {
                auction.push(int(b.auction));
                bidder.push(int(b.bidder));
                price.push(int(b.price));
                channel.append_value(&b.channel);
                url.append_value(&b.url);
                dt.push(date_time);
                extra.append_value(&b.extra);
            }
            _ => return false,
        }
        true
    }

    /// The built columns, in the stream's full column order.
    pub(super) fn finish(self) -> Vec<ArrayRef> {
        fn ints(v: Vec<i64>) -> ArrayRef {
            Arc::new(Int64Array::from(v))
        }
        fn times(v: Vec<i64>) -> ArrayRef {
            Arc::new(TimestampMillisecondArray::from(v))
        }
        fn strs(mut b: StringBuilder) -> ArrayRef {
            Arc::new(b.finish())
        }
        match self {
            Columns::Person {
                id,
                name,
                email_address,
                credit_card,
                city,
                state,
                date_time,
                extra,
            } => vec![
                ints(id),
                strs(name),
                strs(email_address),
                strs(credit_card),
                strs(city),
                strs(state),
                times(date_time),
                strs(extra),
            ],
            Columns::Auction {
                id,
                item_name,
                description,
                initial_bid,
                reserve,
                date_time,
                expires,
                seller,
                category,
                extra,
            } => vec![
                ints(id),
                strs(item_name),
                strs(description),
                ints(initial_bid),
                ints(reserve),
                times(date_time),
                times(expires),
                ints(seller),
                ints(category),
                strs(extra),
            ],
            Columns::Bid {
                auction,
                bidder,
                price,
                channel,
                url,
                date_time,
                extra,
            } => vec![
                ints(auction),
                ints(bidder),
                ints(price),
                strs(channel),
                strs(url),
                times(date_time),
                strs(extra),
            ],
        }
    }
}
