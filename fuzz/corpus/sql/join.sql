CREATE STREAM j AS SELECT b.auction, b.price, p.name, p.city FROM bids b JOIN people p ON b.bidder = p.id;
